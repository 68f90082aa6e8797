# The Hugging Face token: the secret is created here, its value is added out of band
#   printf %s "$HF_TOKEN" | gcloud secrets versions add raytune-hf-token --data-file=-
# so it never enters Terraform state. The launch function reads it as HF_TOKEN and writes it only into
# the Kubernetes Secret hf-secret.
resource "google_secret_manager_secret" "hf_token" {
  secret_id = var.hf_token_secret_id
  labels    = local.labels
  # vs secret_config_basic: setting deletion_protection: the provider default (off): the value lives outside
  # Terraform, and `terraform destroy` takes the deployment down whole
  replication {
    user_managed {
      replicas {
        location = var.region
      }
    }
  }
  depends_on = [google_project_service.apis]
}

# The tracking destinations' credentials (var.tracking_credentials), each made and read as the HF token is:
#   printf %s "$WANDB_API_KEY" | gcloud secrets versions add raytune-wandb-api-key --data-file=-
# The functions write them into the same Kubernetes Secret, each under its variable's name.
resource "google_secret_manager_secret" "tracking" {
  for_each  = toset(var.tracking_credentials)
  secret_id = "raytune-${lower(replace(each.key, "_", "-"))}"
  labels    = local.labels
  replication {
    user_managed {
      replicas {
        location = var.region
      }
    }
  }
  depends_on = [google_project_service.apis]
}
