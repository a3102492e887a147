# The values .env needs (see .env.example). `terraform output -raw dotenv > ../../.env`
# writes a complete .env for auth=connection_string; `dotenv_entra` is the Entra ID one.

output "kafka_bootstrap_servers" {
  description = "IOT_KAFKA_BOOTSTRAP_SERVERS: the namespace's Kafka endpoint."
  value       = "${local.namespace_host}:9093"
}

output "kafka_topic" {
  description = "IOT_KAFKA_TOPIC: the event hub's name."
  value       = azurerm_eventhub.events.name
}

output "kafka_alerts_topic" {
  description = "IOT_KAFKA_ALERTS_TOPIC: the alerts event hub's name."
  value       = azurerm_eventhub.alerts.name
}

output "kafka_connection_string" {
  description = "IOT_KAFKA_CONNECTION_STRING: the namespace's Send+Listen policy's connection string (a secret)."
  value       = azurerm_eventhub_namespace_authorization_rule.send_listen.primary_connection_string
  sensitive   = true
}

output "namespace_host" {
  description = "The namespace's host name."
  value       = local.namespace_host
}

output "entra_scope" {
  description = "IOT_KAFKA_ENTRA_SCOPE: the OAuth scope for auth=entra (also the default)."
  value       = "https://${local.namespace_host}/.default"
}

output "consumer_group" {
  description = "The consumer group created for the processor."
  value       = azurerm_eventhub_consumer_group.processor.name
}

output "entra_role_assignments" {
  description = "Principal id / role pairs granted on the namespace (both event hubs)."
  value       = sort(keys(azurerm_role_assignment.data))
}

output "dotenv" {
  description = "A complete .env for auth=connection_string (holds the secret)."
  sensitive   = true
  value       = <<-EOT
    IOT_KAFKA_AUTH=connection_string
    IOT_KAFKA_CONNECTION_STRING="${azurerm_eventhub_namespace_authorization_rule.send_listen.primary_connection_string}"
    IOT_KAFKA_BOOTSTRAP_SERVERS=${local.namespace_host}:9093
    IOT_KAFKA_TOPIC=${azurerm_eventhub.events.name}
    IOT_KAFKA_ALERTS_TOPIC=${azurerm_eventhub.alerts.name}
  EOT
}

output "dotenv_entra" {
  description = "A complete .env for auth=entra (no secret: the identity comes from az login, a managed identity or AZURE_* variables)."
  value       = <<-EOT
    IOT_KAFKA_AUTH=entra
    IOT_KAFKA_BOOTSTRAP_SERVERS=${local.namespace_host}:9093
    IOT_KAFKA_TOPIC=${azurerm_eventhub.events.name}
    IOT_KAFKA_ALERTS_TOPIC=${azurerm_eventhub.alerts.name}
    IOT_KAFKA_ENTRA_SCOPE=https://${local.namespace_host}/.default
  EOT
}
