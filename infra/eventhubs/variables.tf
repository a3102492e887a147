variable "subscription_id" {
  description = "Azure subscription to deploy into; null uses the ARM_SUBSCRIPTION_ID environment variable."
  type        = string
  default     = null
}

variable "resource_group_name" {
  description = "Resource group to create for the namespace."
  type        = string
  default     = "rg-iot-pulse"
}

variable "location" {
  description = "Azure region, e.g. westeurope."
  type        = string
  default     = "westeurope"
}

variable "namespace_name" {
  description = "Event Hubs namespace name, globally unique: <namespace>.servicebus.windows.net."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9-]{4,48}[A-Za-z0-9]$", var.namespace_name))
    error_message = "namespace_name: 6 to 50 letters, digits and hyphens, starting with a letter and ending with a letter or digit."
  }
}

variable "sku" {
  description = "Namespace tier. The Kafka endpoint needs Standard or Premium (Basic has none)."
  type        = string
  default     = "Standard"

  validation {
    condition     = contains(["Standard", "Premium"], var.sku)
    error_message = "sku must be Standard or Premium: the Basic tier has no Kafka endpoint."
  }
}

variable "capacity" {
  description = "Throughput units (Standard: 1 TU = 1 MB/s or 1,000 events/s in) or processing units (Premium)."
  type        = number
  default     = 1

  validation {
    condition     = var.capacity >= 1 && var.capacity <= 40
    error_message = "capacity must be between 1 and 40."
  }
}

variable "event_hub_name" {
  description = "Event hub name, i.e. the Kafka topic (IOT_KAFKA_TOPIC)."
  type        = string
  default     = "iot-events"
}

variable "partition_count" {
  description = "Partitions of the event hub (Kafka partitions); at most 32 on Standard."
  type        = number
  default     = 4

  validation {
    condition     = var.partition_count >= 1 && var.partition_count <= 32
    error_message = "partition_count must be between 1 and 32 (the Standard tier's limit)."
  }
}

variable "alerts_event_hub_name" {
  description = "Event hub of the real-time alerts, i.e. their Kafka topic (IOT_KAFKA_ALERTS_TOPIC)."
  type        = string
  default     = "iot-alerts"
}

variable "alerts_partition_count" {
  description = "Partitions of the alerts event hub (alerts are keyed by device)."
  type        = number
  default     = 1

  validation {
    condition     = var.alerts_partition_count >= 1 && var.alerts_partition_count <= 32
    error_message = "alerts_partition_count must be between 1 and 32 (the Standard tier's limit)."
  }
}

variable "message_retention_days" {
  description = "Days an event is kept (Standard: 1 to 7). The processor must read within this."
  type        = number
  default     = 1

  validation {
    condition     = var.message_retention_days >= 1 && var.message_retention_days <= 7
    error_message = "message_retention_days must be between 1 and 7 on the Standard tier."
  }
}

variable "consumer_group_name" {
  description = "Consumer group for the processor's readers."
  type        = string
  default     = "iot-pulse-processor"
}

variable "authorization_rule_name" {
  description = "Shared access policy on the namespace (both event hubs) with Send and Listen (no Manage)."
  type        = string
  default     = "iot-pulse-send-listen"
}

variable "local_authentication_enabled" {
  description = "Allow shared access keys (connection strings). false leaves only Entra ID."
  type        = bool
  default     = true
}

variable "entra_principal_ids" {
  description = "Object ids of users, groups, service principals or managed identities that get Azure Event Hubs Data Sender and Data Receiver on the event hub (auth=entra)."
  type        = list(string)
  default     = []
}

variable "grant_current_principal" {
  description = "Also grant both data roles to whoever runs terraform (the az login identity), so auth=entra works right away."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default = {
    project = "iot-pulse"
  }
}
