"""Google's REST APIs the client libraries here do not cover (Service Usage, Resource Manager, Cloud Functions,
Cloud Scheduler, Secret Manager metadata, Artifact Registry, Policy Troubleshooter, GKE, and Cloud Storage's and
Pub/Sub's testIamPermissions), as JSON over an authorized requests session: every call with timeouts, transient
errors retried, statuses as functions.core.errors. `endpoints` points a service elsewhere (the tests' stand-ins)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.adapters.retry import with_retries
from functions.core import errors

TIMEOUT_S = (5.0, 20.0)


def _error(response: Any) -> errors.ControllerError:
    try:
        message = response.json().get("error", {}).get("message") or response.text
    except ValueError:
        message = response.text
    return errors.from_status(response.status_code, str(message)[:500])


class GoogleRest:
    def __init__(self, session: Any = None, endpoints: Mapping[str, str] | None = None, timeout_s=TIMEOUT_S):
        self._session = session
        self.endpoints = dict(endpoints or {})
        self.timeout_s = timeout_s

    @property
    def session(self) -> Any:
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            self._session = AuthorizedSession(credentials)
        return self._session

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
            return response.json() if response.content else {}

        return with_retries(send, f"{method} {service} {path}")

    def get(self, service: str, path: str, params: Any = None) -> Any:
        return self.call("GET", service, path, params=params)

    def post(self, service: str, path: str, body: Any) -> Any:
        return self.call("POST", service, path, body=body)
