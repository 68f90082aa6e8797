"""A Cloud Build API stand-in for gcloud itself (`api_endpoint_overrides/cloudbuild`): it keeps each
CreateBuild request as gcloud sent it and answers as Cloud Build does, a long-running operation whose
metadata carries the build, then the build's end when gcloud describes it. `run` plays the build: given the
request, it answers the end status and the failureInfo (Cloud Build's Build.FailureInfo: FETCH_SOURCE_FAILED
when its identity is refused the source); by default every build succeeds."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tests.fakes.http import BackgroundServer, JsonHandler

Outcome = tuple[str, dict]  # (status, failureInfo)


def succeeds(build: dict) -> Outcome:
    return "SUCCESS", {}


class FakeCloudBuild(BackgroundServer):
    def __init__(self, run: Callable[[dict], Outcome] = succeeds):
        self.builds: list[dict] = []  # the request bodies, in order
        self.ends: dict[int, Outcome] = {}  # a build's end, played once, when it is first described
        self.unknown: list[str] = []
        fake = self

        class Handler(JsonHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                found = re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/builds(\?.*)?", self.path)
                if not found:
                    fake.unknown.append(f"POST {self.path}")
                    return self.reply(404, {"error": {"code": 404, "message": "not served"}})
                project, region = found.group(1), found.group(2)
                build_id = f"build-{len(fake.builds) + 1}"
                fake.builds.append(body)
                build = {**body, "id": build_id, "projectId": project, "status": "QUEUED"}
                self.reply(
                    200,
                    {
                        "name": f"projects/{project}/locations/{region}/operations/op-{build_id}",
                        "metadata": {
                            "@type": "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata",
                            "build": build,
                        },
                    },
                )

            def do_GET(self):
                found = re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/builds/([^/?]+)(\?.*)?", self.path)
                if not found or not found.group(3).startswith("build-"):
                    fake.unknown.append(f"GET {self.path}")
                    return self.reply(404, {"error": {"code": 404, "message": "not served"}})
                index = int(found.group(3).removeprefix("build-")) - 1
                body = fake.builds[index]
                if index not in fake.ends:
                    fake.ends[index] = run(body)
                status, failure = fake.ends[index]
                answer = {**body, "id": found.group(3), "projectId": found.group(1), "status": status}
                if failure:
                    answer |= {"failureInfo": failure, "statusDetail": failure.get("detail", "")}
                self.reply(200, answer)

        super().__init__(Handler)
