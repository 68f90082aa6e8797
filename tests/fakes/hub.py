"""A Hugging Face Hub stand-in for uploads, speaking the HTTP API huggingface_hub's HfApi uses: create a
repo, ask how each file uploads (preupload: every file "regular", so no LFS or Xet transfer), and commit
(an NDJSON body: a header line, then one line per file, base64), its refs and tags (list, create, delete), and a
dataset's revision (`datasets`: repo -> its commit, None for an answer without one; `failing`: the statuses the
next requests get first, as a Hub having a bad moment). It keeps what a real Hub would show:
the repos with their visibility and the commits with their files, and it checks the bearer token."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from urllib.parse import unquote

from tests.fakes.http import JsonHandler


@dataclass
class Commit:
    summary: str
    files: dict[str, bytes]
    oid: str


@dataclass
class Repo:
    private: bool
    commits: list[Commit] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)  # name -> commit oid (the Hub never moves one in place)


class FakeHubUploads(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token: str):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.datasets: dict[str, str | None] = {}
        self.failing: list[int] = []
        self.seen: list[tuple[str, str | None]] = []  # (path, Authorization) of each GET
        self.refused: list[str] = []  # requests without the right token, and paths it does not serve
        hub = self

        class Handler(JsonHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    hub.refused.append(f"unauthorized {self.path}")
                    return self.reply(401, {"error": "Invalid credentials"})
                tag = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tag/([^/?]+)", self.path)
                if tag:
                    return self.tag(tag.group(1), unquote(tag.group(2)), json.loads(body))
                if self.path == "/api/repos/create":
                    request = json.loads(body)
                    repo_id = f"{request['organization']}/{request['name']}"
                    if repo_id in hub.repos:
                        return self.reply(
                            409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo_id}"}
                        )
                    # huggingface_hub 1.x sends "private": true; 2.x "visibility": "private"
                    private = bool(request.get("private")) or request.get("visibility") == "private"
                    hub.repos[repo_id] = Repo(private=private)
                    return self.reply(200, {"url": f"{hub.url}/{repo_id}", "name": repo_id})
                match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(preupload|commit)/main(\?.*)?", self.path)
                if not match or match.group(1) not in hub.repos:
                    hub.refused.append(f"not found {self.path}")
                    return self.reply(404, {"error": "Repository not found"})
                repo = hub.repos[match.group(1)]
                if match.group(2) == "preupload":
                    files = json.loads(body)["files"]
                    modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                    return self.reply(
                        200, {"files": modes, "commitOid": repo.commits[-1].oid if repo.commits else None}
                    )
                lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                header = next(line["value"] for line in lines if line["key"] == "header")
                files = {
                    line["value"]["path"]: base64.b64decode(line["value"]["content"])
                    for line in lines
                    if line["key"] == "file"
                }
                oid = hashlib.sha1(body).hexdigest()
                repo.commits.append(Commit(summary=header["summary"], files=files, oid=oid))
                return self.reply(
                    200,
                    {
                        "commitUrl": f"{hub.url}/{match.group(1)}/commit/{oid}",
                        "commitOid": oid,
                        "pullRequestUrl": None,
                    },
                )

            def do_GET(self):
                if self.path.startswith("/api/agent-harnesses"):  # public on the Hub; asked where an agent runs
                    return self.reply(200, {"standardEnvVars": [], "harnesses": {}})
                hub.seen.append((self.path, self.headers.get("Authorization")))
                if hub.failing:
                    return self.reply(hub.failing.pop(0), {"error": "the Hub is having a moment"})
                revision = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/revision/main", self.path)
                if revision:
                    return self.dataset(revision.group(1))
                match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/refs(\?.*)?", self.path)
                if not self.authorized() or not match:
                    return None
                repo = hub.repos.get(match.group(1))
                if repo is None:
                    return self.reply(404, {"error": "Repository not found"})
                head = repo.commits[-1].oid if repo.commits else None
                branches = [{"name": "main", "ref": "refs/heads/main", "targetCommit": head}] if head else []
                tags = [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": o} for n, o in repo.tags.items()]
                return self.reply(200, {"branches": branches, "converts": [], "tags": tags})

            def do_DELETE(self):
                match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tag/([^/?]+)", self.path)
                if not self.authorized() or not match:
                    return None
                repo = hub.repos.get(match.group(1))
                name = unquote(match.group(2))
                if repo is None or name not in repo.tags:
                    return self.reply(404, {"error": f"Invalid rev id: {name}"})
                del repo.tags[name]
                return self.reply(200, {})

            def dataset(self, repo: str):
                if repo not in hub.datasets:
                    return self.reply(404, {"error": "Dataset not found"})
                if not self.authorized():
                    return None
                sha = hub.datasets[repo]
                return self.reply(200, {"id": repo, **({"sha": sha} if sha else {})})

            def authorized(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    hub.refused.append(f"unauthorized {self.command} {self.path}")
                    self.reply(401, {"error": "Invalid credentials"})
                    return False
                return True

            def tag(self, repo_id: str, revision: str, request: dict):
                """POST .../tag/{revision} {"tag": name, "message": ...}: as the Hub, a tag that exists is a
                409 (never moved), a revision that is no commit a 404."""
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self.reply(404, {"error": "Repository not found"})
                oids = [c.oid for c in repo.commits]
                oid = oids[-1] if revision == "main" and oids else revision
                if oid not in oids:
                    return self.reply(404, {"error": f"Invalid rev id: {revision}"})
                if request["tag"] in repo.tags:
                    return self.reply(409, {"error": "Tag already exists"})
                repo.tags[request["tag"]] = oid
                return self.reply(200, {})

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"
