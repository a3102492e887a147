# An Azure Event Hubs namespace the pipeline can use through its Kafka endpoint:
# namespace (Standard or Premium) -> the events hub (the topic) with partitions and a
# consumer group, and the alerts hub (the real-time alerts' topic); a Send+Listen shared
# access policy on the namespace, which reaches both hubs (auth=connection_string), and the
# Entra ID data role assignments on the namespace (auth=entra). outputs.tf gives the values
# .env needs.

data "azurerm_client_config" "current" {}

locals {
  namespace_host = "${azurerm_eventhub_namespace.main.name}.servicebus.windows.net"
  data_roles     = ["Azure Event Hubs Data Sender", "Azure Event Hubs Data Receiver"]
  principals = distinct(concat(
    var.entra_principal_ids,
    var.grant_current_principal ? [data.azurerm_client_config.current.object_id] : [],
  ))
  role_assignments = {
    for pair in setproduct(local.principals, local.data_roles) :
    "${pair[0]}/${pair[1]}" => { principal_id = pair[0], role = pair[1] }
  }
}

resource "azurerm_resource_group" "main" {
  name     = var.resource_group_name
  location = var.location
  tags     = var.tags
}

resource "azurerm_eventhub_namespace" "main" {
  name                          = var.namespace_name
  location                      = azurerm_resource_group.main.location
  resource_group_name           = azurerm_resource_group.main.name
  sku                           = var.sku
  capacity                      = var.capacity
  minimum_tls_version           = "1.2"
  local_authentication_enabled  = var.local_authentication_enabled
  public_network_access_enabled = true
  tags                          = var.tags
}

resource "azurerm_eventhub" "events" {
  name              = var.event_hub_name
  namespace_id      = azurerm_eventhub_namespace.main.id
  partition_count   = var.partition_count
  message_retention = var.message_retention_days
}

resource "azurerm_eventhub" "alerts" {
  name              = var.alerts_event_hub_name
  namespace_id      = azurerm_eventhub_namespace.main.id
  partition_count   = var.alerts_partition_count
  message_retention = var.message_retention_days
}

resource "azurerm_eventhub_consumer_group" "processor" {
  name                = var.consumer_group_name
  namespace_name      = azurerm_eventhub_namespace.main.name
  eventhub_name       = azurerm_eventhub.events.name
  resource_group_name = azurerm_resource_group.main.name
}

resource "azurerm_eventhub_namespace_authorization_rule" "send_listen" {
  name                = var.authorization_rule_name
  namespace_name      = azurerm_eventhub_namespace.main.name
  resource_group_name = azurerm_resource_group.main.name
  send                = true
  listen              = true
  manage              = false
}

resource "azurerm_role_assignment" "data" {
  for_each = local.role_assignments

  scope                = azurerm_eventhub_namespace.main.id
  role_definition_name = each.value.role
  principal_id         = each.value.principal_id
}
