terraform {
  required_version = ">= 1.5"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.20, < 8"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.5, < 4"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

data "google_project" "this" {}

data "google_storage_project_service_account" "gcs" {}
