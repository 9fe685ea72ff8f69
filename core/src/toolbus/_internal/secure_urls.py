"""URLs that secrets or trust travel over: ``https``, or plain ``http`` on a loopback host only."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_LOOPBACK_NAMES = ("localhost",)


def plain_http_problem(url: str, *, risk: str) -> str | None:
    """What is wrong with ``url`` for something that must not be read or forged on the way,
    or None. ``risk`` says what could happen over plain HTTP (for the message)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{url!r} is not an http(s) URL"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return f"{url!r} is plain HTTP: {risk}; use https (plain http only on a loopback address)"
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
