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
