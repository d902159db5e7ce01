"""Image content as the model APIs check it, for both fakes.

Anthropic: an ``image`` block only in a user turn, ``source`` base64 (``media_type`` one of
jpeg/png/gif/webp, ``data`` valid base64 of at most 5 MB as text (3.75 MB decoded), bytes that
are that format) or ``url``. OpenAI: an ``image_url`` part (user turns only; the fake's content
check) whose ``url`` is a ``data:image/...;base64,`` URL of valid bytes or an http(s) URL,
``detail`` auto/low/high.
``supported = False`` plays a text-only model: any image is a 400 like the real ones.
``check_bytes = False`` skips the format sniffing (the real APIs do sniff).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
ANTHROPIC_MAX_IMAGE_BYTES = 5 * 1024 * 1024
OPENAI_MAX_IMAGE_BYTES = 20 * 1024 * 1024
_DATA_URL = re.compile(r"^data:(?P<type>[\w/+.-]+);base64,(?P<data>.*)$", re.S)
_MAGIC: Mapping[str, Callable[[bytes], bool]] = {
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/gif": lambda b: b[:6] in (b"GIF87a", b"GIF89a"),
    "image/webp": lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
}


class ImageRejected(Exception):
    """A 400 about an image: ``message`` (and ``param`` for OpenAI)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def _decode(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


@attrs.define
class ImageRules:
    supported: bool = True
    check_bytes: bool = True

    def check_anthropic(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Raises ImageRejected for a bad ``image`` block (messages already validated)."""
        for i, message in enumerate(messages):
            content = message["content"]
            for j, block in enumerate(content if isinstance(content, list) else ()):
                if block.get("type") == "image":
                    self._anthropic_block(block, message["role"], f"messages.{i}.content.{j}")

    def _anthropic_block(self, block: Mapping[str, Any], role: str, where: str) -> None:
        if role != "user":
            raise ImageRejected(f"{where}: Image blocks are only allowed in user messages")
        if set(block) - {"type", "source", "cache_control"}:
            extra = sorted(set(block) - {"type", "source", "cache_control"})[0]
            raise ImageRejected(f"{where}.image.{extra}: Extra inputs are not permitted")
        source = block.get("source")
        if not isinstance(source, dict) or source.get("type") not in ("base64", "url"):
            raise ImageRejected(
                f"{where}.image.source: Input tag found using 'type' does not match any of the "
                "expected tags: 'base64', 'url', 'file'"
            )
        if not self.supported:
            raise ImageRejected(f"{where}.image: This model does not support image input.")
        if source["type"] == "url":
            if not re.match(r"^https?://", str(source.get("url", ""))):
                raise ImageRejected(f"{where}.image.source.url: Input should be a valid URL")
            return
        media = source.get("media_type")
        if media not in MEDIA_TYPES:
            raise ImageRejected(
                f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
                "'image/png', 'image/gif' or 'image/webp'"
            )
        raw = _decode(source.get("data"))
        if raw is None:
            raise ImageRejected(f"{where}.image.source.base64.data: Invalid base64 data")
        if (size := len(source["data"])) > ANTHROPIC_MAX_IMAGE_BYTES:  # the base64 text's
            raise ImageRejected(
                f"{where}.image.source.base64: image exceeds 5 MB maximum: {size} bytes > "
                f"{ANTHROPIC_MAX_IMAGE_BYTES} bytes"
            )
        if self.check_bytes and not _MAGIC[media](raw):
            raise ImageRejected(
                f"{where}.image.source.base64.data: Image does not match the provided media "
                f"type {media}"
            )

    def check_openai(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Raises ImageRejected for a bad ``image_url`` part (messages already validated)."""
        for i, message in enumerate(messages):
            content = message.get("content")
            for k, part in enumerate(content if isinstance(content, list) else ()):
                if part.get("type") == "image_url":
                    self._openai_part(part, f"messages[{i}].content[{k}]")

    def _openai_part(self, part: Mapping[str, Any], where: str) -> None:
        if not self.supported:
            raise ImageRejected(
                "Invalid content type. image_url is only supported by certain models.",
                f"{where}.type",
            )
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            raise ImageRejected(
                f"Missing required parameter: '{where}.image_url.url'.",
                f"{where}.image_url.url",
                "missing_required_parameter",
            )
        if set(image) - {"url", "detail"} or image.get("detail", "auto") not in (
            "auto",
            "low",
            "high",
        ):
            raise ImageRejected(f"Invalid '{where}.image_url'.", f"{where}.image_url")
        url = image["url"]
        if re.match(r"^https?://", url):
            return
        found = _DATA_URL.match(url)
        if found is None:
            raise ImageRejected(
                f"Invalid '{where}.image_url.url'. Expected a base64-encoded data URL with an "
                "image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got "
                "a value without the 'data:' prefix.",
                f"{where}.image_url.url",
                "invalid_value",
            )
        media, raw = found["type"], _decode(found["data"])
        bad = (
            raw is None
            or media not in MEDIA_TYPES
            or len(raw) > OPENAI_MAX_IMAGE_BYTES
            or (self.check_bytes and not _MAGIC[media](raw))
        )
        if bad:
            raise ImageRejected(
                "You uploaded an unsupported image. Please make sure your image is valid.",
                None,
                "invalid_image_format",
            )
