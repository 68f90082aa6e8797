"""report.html as a reader sees it, without a browser: its sections, its text, its images decoded."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

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
