"""Google's REST APIs the client libraries here do not cover (Service Usage, Resource Manager, Cloud Functions,
Cloud Scheduler, Secret Manager metadata, Artifact Registry, Policy Troubleshooter, GKE, and Cloud Storage's and
Pub/Sub's testIamPermissions), as JSON over an authorized requests session: every call with timeouts, transient
errors retried, statuses as functions.core.errors. `endpoints` points a service elsewhere (the tests' stand-ins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from functions.adapters.retry import with_retries
from functions.core import errors
from functions.core.secrets import redact

TIMEOUT_S = (5.0, 20.0)


def _error(response: Any) -> errors.ControllerError:
    """The API's error as one of functions.core.errors, its message redacted (an error can quote the request's
    headers, the caller's bearer token among them)."""
    try:
        said = response.json()
        message = (said.get("error") or {}).get("message") if isinstance(said, dict) else None
    except ValueError:
        message = None
    return errors.from_status(response.status_code, redact(str(message or response.text))[:500])


class NoCredentials(errors.PermanentError):
    """No Google credentials on this machine: nothing can be asked."""


@dataclass(frozen=True)
class Caller:
    """Who asks, and which project their quota is taken from (user credentials need one: x-goog-user-project)."""

    quota_project: str | None
    quota_from: str  # "the credentials", "the deployment's project", or "" (a service account needs none)


class GoogleRest:
    def __init__(self, session: Any = None, endpoints: Mapping[str, str] | None = None, timeout_s=TIMEOUT_S):
        self._session = session
        self.endpoints = dict(endpoints or {})
        self.timeout_s = timeout_s

    @property
    def session(self) -> Any:
        if self._session is None:
            self.sign_in()
        return self._session

    def sign_in(self, project: str | None = None) -> Caller:
        """Application default credentials, once; NoCredentials where there are none. User credentials without a
        quota project of their own are given `project`'s: several APIs answer 403 to user credentials without one."""
        import google.auth
        from google.auth import exceptions
        from google.auth.transport.requests import AuthorizedSession

        try:
            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except exceptions.DefaultCredentialsError as exc:
            raise NoCredentials(
                "no Google credentials: run `gcloud auth application-default login` (or set "
                "GOOGLE_APPLICATION_CREDENTIALS to a key file)"
            ) from exc
        caller = Caller(None, "")
        if getattr(credentials, "quota_project_id", None):
            caller = Caller(credentials.quota_project_id, "the credentials")
        elif project and _is_user(credentials) and hasattr(credentials, "with_quota_project"):
            credentials = credentials.with_quota_project(project)
            caller = Caller(project, "the deployment's project")
        self._session = AuthorizedSession(credentials)
        return caller

    def url(self, service: str, path: str) -> str:
        return self.endpoints.get(service, f"https://{service}.googleapis.com").rstrip("/") + "/" + path.lstrip("/")

    def call(self, method: str, service: str, path: str, body: Any = None, params: Any = None) -> Any:
        """The answer's JSON; NotFound, PermanentError (403 included) or TransientError otherwise."""

        def send() -> Any:
            try:
                response = self.session.request(
                    method, self.url(service, path), json=body, params=params, timeout=self.timeout_s
                )
            except Exception as exc:  # requests' transport errors
                raise errors.TransientError(f"{type(exc).__name__}: {exc}") from exc
            if response.status_code >= 400:
                raise _error(response)
            if not response.content:
                return {}
            try:
                return response.json()
            except ValueError as exc:  # an HTML page from a proxy or a login portal, not the API's JSON
                said = " ".join(redact(response.text[:120]).split())
                raise errors.PermanentError(
                    f"answered {response.status_code} with something not JSON: {said!r}"
                ) from exc

        return with_retries(send, f"{method} {service} {path}")

    def get(self, service: str, path: str, params: Any = None) -> Any:
        return self.call("GET", service, path, params=params)

    def post(self, service: str, path: str, body: Any) -> Any:
        return self.call("POST", service, path, body=body)


def _is_user(credentials: Any) -> bool:
    """A person's credentials (gcloud auth application-default login), not a service account's."""
    from google.oauth2 import credentials as user

    return isinstance(credentials, user.Credentials)
