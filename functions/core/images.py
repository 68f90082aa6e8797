"""Container image references parsed the way container runtimes parse them (the distribution/reference grammar
docker and containerd share: `[domain/]path[:tag][@digest]`, the first component a domain only when it has a
`.` or `:` or is `localhost`, docker.io and `library/` filled in otherwise), and the operator's allowed-image
patterns matched on those parts, never as a glob over the whole string: `evil.example/us-docker.pkg.dev/p/x`
has the domain `evil.example`, whatever its path says.

A pattern is a reference whose domain may start with `*` for one DNS label (`*-docker.pkg.dev`: any region),
whose path components may hold `*` within the component, and whose path may end in `/*` (anything below)."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_DOMAIN = "docker.io"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
)


@dataclass(frozen=True)
class Reference:
    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None


def _split_domain(text: str) -> tuple[str, str]:
    """(domain, the rest): the first component is a domain only when it has a `.` or `:` or is `localhost`."""
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return DEFAULT_DOMAIN, text


def parse(text: str) -> Reference:
    """The reference's parts, as a container runtime resolves them; ValueError when it is not one."""
    domain, rest = _split_domain(text)
    match = REFERENCE.fullmatch(f"{domain}/{rest}")
    if match is None or match["domain"] is None:
        raise ValueError(f"{text!r} is not an image reference")
    domain, path = match["domain"], match["path"]
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = f"library/{path}"
    return Reference(domain, path, match["tag"], match["digest"])


def _pattern_parts(pattern: str) -> tuple[str, list[str], bool]:
    """(domain pattern, path components, whether anything below is allowed)."""
    below = pattern.endswith("/*")
    domain, path = _split_domain(pattern[:-2] if below else pattern)
    components = path.split("/") if path else []
    if domain == DEFAULT_DOMAIN and len(components) == 1 and not below:
        components = ["library", *components]
    return domain, components, below


def _component(pattern: str, value: str) -> bool:
    regex = "[^/]*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, value) is not None


def allowed(image: str, pattern: str) -> bool:
    """Whether `image` is one `pattern` admits (see the module's docstring for what a pattern may say); `*`
    alone admits every image (the embedded local default's policy)."""
    if pattern == "*":
        return True
    try:
        ref = parse(image)
    except ValueError:
        return False
    domain, components, below = _pattern_parts(pattern)
    if domain.startswith("*"):
        suffix = domain[1:]
        label = ref.domain[: len(ref.domain) - len(suffix)] if ref.domain.endswith(suffix) else ""
        if not re.fullmatch(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?", label):
            return False
    elif ref.domain != domain:
        return False
    path = ref.path.split("/")
    if len(path) < len(components) or (not below and len(path) != len(components)):
        return False
    if below and len(path) == len(components):
        return False  # "x/*" admits what is under x, not x itself
    return all(_component(p, v) for p, v in zip(components, path, strict=False))
