"""report.html as a reader sees it: without a browser (its sections, its text, its images decoded), and in one."""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

from PIL import Image


class ReportPage(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.images: list[Image.Image] = []
        self.ids: list[str] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "img":
            kind, _, payload = (attributes.get("src") or "").partition(",")
            assert kind == "data:image/jpeg;base64", "images are embedded: nothing is fetched"
            image = Image.open(io.BytesIO(base64.b64decode(payload)))
            image.load()  # decodes, or raises
            self.images.append(image)
        if attributes.get("id"):
            self.ids.append(attributes["id"] or "")

    def handle_data(self, data):
        self.text.append(data)


def in_browser(path: Path, tmp_path: Path) -> str | None:
    """The page as a person opens it, in headless Chromium: screenshotted (and not blank) and its DOM as rendered;
    None where the machine has no Chromium (CI installs it)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu"]
    shot = tmp_path / f"{path.stem}.png"
    run = dict(capture_output=True, timeout=120, check=True)
    subprocess.run([*flags, "--window-size=1100,900", f"--screenshot={shot}", path.as_uri()], **run)
    with Image.open(shot) as rendered:
        colours = rendered.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the page rendered blank"
    return subprocess.run([*flags, "--dump-dom", path.as_uri()], text=True, **run).stdout
