"""URLs as they may be shown: in messages, log lines, metrics, traces and answers.

A broker's, a state store's or a model's URL may carry secrets in two places:
its user info (``nats://TOKEN@host``, ``redis://user:PASSWORD@host``) and its
query options (``nats://host?token=...``, ``redis://host?password=...``).
Which options are secret differs from one adapter to the next, and a new
option may be one, so :func:`redact_url` hides the value of *every* option,
keeping its name (so that a reader still sees which options were given).
Everything that shows a URL shows it through this one function; the command
line's log lines pass through it as well (:class:`RedactingFormatter`), so that
a URL a library puts in a message or a traceback is shown the same way.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit

#: What is shown where a secret (or what may be one) was.
HIDDEN = "***"


def redact_url(url: str) -> str:
    """``url`` as it may be shown: no user info, no option values, no fragment.

    ``nats://s3cret@h1:4222,h2:4222?token=abc&tls`` is shown as
    ``nats://***@h1:4222,h2:4222?token=***&tls``. A URL that cannot be read at
    all (a bracket left open) is not shown: only its scheme, if it has one.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme = url.partition("://")[0] if "://" in url else ""
        readable = scheme[:1].isalpha() and all(c.isalnum() or c in "+-." for c in scheme)
        return f"{scheme}://{HIDDEN}" if readable else HIDDEN
    # Put together by hand: urlunsplit drops the '//' of a URL with no host (memory://).
    head = f"{parts.scheme}:" if parts.scheme else ""
    if url[len(head) :].startswith("//"):
        head += "//"
    netloc, path = parts.netloc, parts.path
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rpartition('@')[2]}"
    elif not netloc and "@" in path:  # no '//': 'user:password@host', read as scheme 'user'
        head, path = "", f"{HIDDEN}@{path.rpartition('@')[2]}"
    query = "&".join(
        f"{name}={HIDDEN}" if given else name
        for name, given, _ in (option.partition("=") for option in parts.query.split("&"))
        if name or given
    )
    return f"{head}{netloc}{path}{'?' if query else ''}{query}"


#: A URL within text: a scheme, '://', and what follows up to a space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def redact_urls(text: str) -> str:
    """``text`` with every URL in it shown as :func:`redact_url` shows it."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(_redacted_in_text, text)


def _redacted_in_text(found: re.Match[str]) -> str:
    url = found.group(0)
    # Punctuation closing a sentence or a bracket is the text's, not the URL's.
    kept = url.rstrip(".,;:!)]}")
    return redact_url(kept) + url[len(kept) :]


class RedactingFormatter(logging.Formatter):
    """A log formatter whose lines (tracebacks included) show URLs only redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls(super().format(record))
