"""Reading a broker's options: the URL's query parameters and the ``options`` mapping.

An adapter describes its options as a pydantic model (``extra="forbid"``, so a
misspelt option fails instead of being ignored); :func:`parse_broker_options`
merges the query string with the mapping (the mapping wins, so a secret can
stay out of the URL) and validates them, reporting every bad option at once as
a :class:`~toolbus.domain.errors.BrokerOptionError`. Values never appear in
the messages: an option may hold a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import SplitResult, parse_qsl, urlsplit

import pydantic

from toolbus.domain.errors import BrokerOptionError, Problem

Options = TypeVar("Options", bound=pydantic.BaseModel)


def parse_broker_options(
    model: type[Options], query: str, options: Mapping[str, Any] | None, *, where: str
) -> Options:
    """``model`` from ``query`` (a URL's query string) and ``options`` on top.

    ``where`` names what is being read in messages, e.g. ``"memory bus URL 'memory://x'"``.
    """
    values: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
    values.update(options or {})
    try:
        return model.model_validate(values)
    except pydantic.ValidationError as exc:
        known = ", ".join(model.model_fields)
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            name = ".".join(str(part) for part in error["loc"])
            if error["type"] == "extra_forbidden":
                message = f"is not an option here; known: {known}"
            else:
                message = error["msg"][:1].lower() + error["msg"][1:]
            problems.append(Problem(where, name, message))
        raise BrokerOptionError(problems) from None


def host_port(server: str, default_port: int) -> str:
    """``host:port`` for one server of a broker URL: ``host``, ``host:port``, ``[v6]``,
    ``[v6]:port`` (IPv6 literals keep their brackets). Raises ValueError otherwise."""
    server = server.strip()
    if server.startswith("["):  # an IPv6 literal; its own colons are not the port's
        host, bracket, port = server[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise ValueError(f"{server!r} is not host[:port]")
        host, port = f"[{host}]" if host else "", port[1:]
    else:
        host, _, port = server.partition(":")
    port = port or str(default_port)
    if not host or not port.isdigit() or ":" in port:
        raise ValueError(f"{server!r} is not host[:port]")
    return f"{host}:{port}"


def split_url(url: str, broker: str) -> SplitResult:
    """``urlsplit(url)``, with its complaint as a :class:`BrokerOptionError` naming ``broker``.

    The URL itself is left out of the message: it may carry a password.
    """
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise BrokerOptionError(
            f"the {broker} URL cannot be read ({exc}); an IPv6 host goes in brackets, "
            "with its port after them: [::1]:4222"
        ) from None
