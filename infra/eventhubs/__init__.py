"""Terraform for an Azure Event Hubs namespace that the pipeline can use (see docs/eventhubs.md)."""
