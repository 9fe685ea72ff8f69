"""The in-memory bus's URL and options: ``memory://[name][?buffer_size=N&max_message_size=N]``.

Options come as URL query parameters or in the ``options`` mapping (which
wins), read like every broker's
(:func:`~toolbus._internal.broker_options.parse_broker_options`): an unknown one
is a :class:`~toolbus.domain.errors.BrokerOptionError`, as on every broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pydantic

from toolbus._internal.broker_options import BrokerOptions, parse_broker_options
from toolbus._internal.urls import redact_url
from toolbus.domain.errors import BrokerOptionError

DEFAULT_BUFFER = 10_000
DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024


class MemoryOptions(BrokerOptions):
    """The in-memory bus's options, as URL query parameters or ``options``."""

    #: Messages each group's or fan-out subscriber's buffer holds before publishers wait.
    buffer_size: int = pydantic.Field(DEFAULT_BUFFER, ge=1)
    max_message_size: int = pydantic.Field(DEFAULT_MAX_MESSAGE, ge=1)

    # The broker's name is the URL's, not an option: never read from the mapping.
    _name: str = pydantic.PrivateAttr("default")

    @property
    def name(self) -> str:
        """The in-process broker the URL names (``memory://name``; ``default`` for ``memory://``)."""
        return self._name


def parse_options(
    url: str = "memory://", options: Mapping[str, Any] | None = None
) -> MemoryOptions:
    """Read ``url`` (``memory://`` or ``memory://name``) and ``options`` (which wins)."""
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise BrokerOptionError(
            f"not an in-memory bus URL: {redact_url(url)!r}; use 'memory://' or 'memory://name'"
        )
    parsed = parse_broker_options(
        MemoryOptions, parts.query, options, where=f"memory bus URL {redact_url(url)!r}"
    )
    parsed._name = (parts.netloc + parts.path).strip("/") or "default"
    return parsed
