"""An API's answers as observations and errors: bounded, compact, typed.

2xx JSON becomes compact JSON text, other text stays as it is, bytes that are
not text are described, not shown; anything past the byte limit is not read.
Non-2xx answers become the toolbus error type that fits the status, with a
bounded excerpt of the body.
"""

from __future__ import annotations

import codecs
import json
import re
from urllib.parse import quote

import httpx

from toolbus.domain.errors import (
    AccessDenied,
    BadRequest,
    NotFound,
    ToolCallError,
    ToolServiceError,
    Unavailable,
)

_JSON_TYPE = re.compile(r"^application/(?:[\w.+-]+\+)?json\b", re.IGNORECASE)
_TEXT_TYPE = re.compile(
    r"^(?:text/|application/(?:[\w.+-]+\+)?(?:json|xml|yaml|javascript)\b)", re.IGNORECASE
)


async def observation(response: httpx.Response, limit: int) -> str:
    """The observation for a successful answer, read up to ``limit`` bytes."""
    data, cut = await read_bounded(response, limit)
    content_type = response.headers.get("content-type", "")
    if not data:
        return f"HTTP {response.status_code} {response.reason_phrase}: no content"
    if content_type and not _TEXT_TYPE.match(content_type):
        return (
            f"HTTP {response.status_code}: {len(data)}{'+' if cut else ''} bytes of "
            f"{content_type.split(';', 1)[0]} (not text; not shown)"
        )
    text = decode(data, response.encoding or "utf-8", final=not cut)
    if cut:
        return f"{text}\n[response truncated at {limit} bytes]"
    if _JSON_TYPE.match(content_type):
        try:
            document = json.loads(text)
        except ValueError:
            return text
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return text


async def error_message(label: str, response: httpx.Response, limit: int) -> str:
    """``label answered HTTP 404 Not Found: <up to limit bytes of the body>``."""
    data, cut = await read_bounded(response, limit)
    excerpt = " ".join(decode(data, response.encoding or "utf-8", final=not cut).split())
    return f"{label} answered HTTP {response.status_code} {response.reason_phrase}" + (
        f": {excerpt}{' …' if cut else ''}" if excerpt else ""
    )


def error_for(status: int, message: str) -> ToolCallError:
    """The toolbus error for an HTTP status."""
    if status in (400, 405, 409, 412, 413, 415, 422):
        return BadRequest(message)
    if status in (401, 403):
        return AccessDenied(message)
    if status in (404, 410):
        return NotFound(message)
    if status in (408, 429, 502, 503, 504):
        return Unavailable(message)
    return ToolServiceError(message)


async def read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of the body, and whether there was more (not read)."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            return bytes(data[:limit]), True
    return bytes(data), False


def decode(data: bytes, encoding: str, *, final: bool) -> str:
    try:
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # A cut answer may end inside a character: leave that partial character out.
    return str(decoder.decode(data, final=final))


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with each secret, as is, JSON-escaped or percent-encoded, replaced by ``***``."""
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1], quote(secret, safe="")}:
            if form:
                text = text.replace(form, "***")
    return text
