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
from collections.abc import Sequence
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


async def observation(response: httpx.Response, limit: int, secrets: Sequence[str] = ()) -> str:
    """The observation for a successful answer: up to ``limit`` bytes, ``secrets`` redacted."""
    content_type = response.headers.get("content-type", "")
    if content_type and not _TEXT_TYPE.match(content_type):
        data, cut = await read_bounded(response, limit)
        if not data:
            return f"HTTP {response.status_code} {response.reason_phrase}: no content"
        return (
            f"HTTP {response.status_code}: {len(data)}{'+' if cut else ''} bytes of "
            f"{content_type.split(';', 1)[0]} (not text; not shown)"
        )
    text, cut = await _read_text(response, limit, secrets)
    if not text and not cut:
        return f"HTTP {response.status_code} {response.reason_phrase}: no content"
    if cut:
        return f"{text}\n[response truncated at {limit} bytes]"
    if _JSON_TYPE.match(content_type):
        try:
            document = json.loads(text)
        except ValueError:
            return text
        # Escapes in the JSON (\u0073...) are letters now: redact what they spelt too.
        return redact(json.dumps(document, ensure_ascii=False, separators=(",", ":")), secrets)
    return text


async def error_message(
    label: str, response: httpx.Response, limit: int, secrets: Sequence[str] = ()
) -> str:
    """``label answered HTTP 404 Not Found: <up to limit bytes of the body>``, redacted."""
    text, cut = await _read_text(response, limit, secrets)
    shown = " ".join(text.split())
    return f"{label} answered HTTP {response.status_code} {response.reason_phrase}" + (
        f": {shown}{' …' if cut else ''}" if shown else ""
    )


def excerpt(text: str, secrets: Sequence[str], limit: int) -> str:
    """``text`` with ``secrets`` redacted, then cut to ``limit`` characters (marked)."""
    text = redact(text, secrets)
    return text if len(text) <= limit else text[:limit] + " …"


async def _read_text(
    response: httpx.Response, limit: int, secrets: Sequence[str]
) -> tuple[str, bool]:
    """Up to ``limit`` bytes of the body as text, secrets redacted, and whether it was cut.

    Redacted before it is cut: a secret that straddles the limit is read in
    full (the longest secret's length more is read) and replaced, rather than
    its beginning shown.
    """
    margin = max((len(form.encode("utf-8")) for form in _forms(secrets)), default=0)
    data, cut = await read_bounded(response, limit + margin)
    text = redact(decode(data, response.encoding or "utf-8", final=not cut), secrets)
    encoded = text.encode("utf-8")
    if len(encoded) > limit:
        # A cut may fall inside a character: leave that partial character out.
        text, cut = encoded[:limit].decode("utf-8", "ignore"), True
    return text, cut


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


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with each secret, as is, JSON-escaped or percent-encoded, replaced by ``***``."""
    for form in _forms(secrets):
        text = text.replace(form, "***")
    return text


def _forms(secrets: Sequence[str]) -> list[str]:
    """Each secret as is, JSON-escaped and percent-encoded; the longest first."""
    forms = {
        form
        for secret in secrets
        for form in (secret, json.dumps(secret)[1:-1], quote(secret, safe=""))
        if form
    }
    return sorted(forms, key=len, reverse=True)
