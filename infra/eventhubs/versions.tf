terraform {
  required_version = ">= 1.6.0"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.55"
    }
  }
}

provider "azurerm" {
  features {}

  # null: taken from ARM_SUBSCRIPTION_ID, or set subscription_id in terraform.tfvars.
  subscription_id = var.subscription_id
}
