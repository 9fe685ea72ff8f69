"""Broker URL and options: parsing, validation, and what they become for pulsar-client.

The URL may list several brokers (``pulsar://pulsar-1:6650,pulsar-2:6650``);
pulsar-client spreads its lookups over them and moves on from one that does not
answer. Options come from the URL's query string (``pulsar://host:6650?operation_timeout=5``)
and from the ``options`` mapping (``[broker-options]`` in ``toolbus.toml``); the
mapping wins. Every problem is reported at once, as a :class:`BrokerOptionError`
naming the option and the fix. Secrets (tokens, passwords) never appear in
messages: :attr:`PulsarOptions.safe_url` is the URL without query or user info.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pulsar

from toolbus.broker_options import host_port
from toolbus.domain.errors import BrokerOptionError, Problem
from toolbus.settings import option_flag

SCHEMES = ("pulsar", "pulsar+ssl")
DEFAULT_PORT = 6650

#: Apache Pulsar's default ``maxMessageSize`` (5 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

LOG_LEVELS = ("debug", "info", "warn", "error")
_SECRET_OPTIONS = frozenset({"token", "basic_password", "oauth2"})


@dataclass(frozen=True, slots=True)
class PulsarOptions:
    """Everything the adapter needs to know, validated. Times are in seconds."""

    #: The service URL handed to pulsar-client (query string removed).
    service_url: str
    #: How long ``connect`` waits for the broker before failing (also the TCP connect timeout).
    connect_timeout: float = 5.0
    #: Bound on broker operations: creating producers and subscriptions, and each send.
    operation_timeout: float = 10.0
    #: Delay before a nacked message is delivered again (Pulsar's default is 60 s).
    nack_redelivery_delay: float = 1.0
    #: Messages each consumer prefetches. Larger is faster; smaller spreads work more
    #: evenly across the members of a persistent group.
    receiver_queue_size: int = 1000
    #: Unreceipted sends per topic; beyond that ``publish`` waits (backpressure).
    max_pending_messages: int = 1000
    #: Largest body ``publish`` accepts. Match the broker's ``maxMessageSize``.
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    #: Batch sends for up to this long (seconds); 0 sends every message at once.
    batching_delay: float = 0.0
    #: Wait for the broker's receipt of sends to non-persistent topics too
    #: (sends to persistent topics always wait).
    confirm_non_persistent: bool = False
    #: pulsar-client I/O threads.
    io_threads: int = 1
    #: pulsar-client's own log lines at this level and above go to the
    #: ``toolbus_pulsar.client`` logger: debug, info, warn or error.
    client_log_level: str = "warn"
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    oauth2: str | None = field(default=None, repr=False)
    basic_username: str | None = None
    basic_password: str | None = field(default=None, repr=False)
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_trust_certs_file: str | None = None
    tls_allow_insecure: bool = False
    tls_validate_hostname: bool = False

    @property
    def safe_url(self) -> str:
        """The service URL as it may be shown to people: no query, no user info."""
        return _strip_userinfo(self.service_url)

    def client_key(self) -> tuple[Any, ...]:
        """Identity of the pulsar-client ``Client`` these options need (see ``clients``)."""
        return (
            self.service_url,
            self.connect_timeout,
            self.operation_timeout,
            self.io_threads,
            self.client_log_level,
            self.token,
            self.token_file,
            self.oauth2,
            self.basic_username,
            self.basic_password,
            self.tls_cert_file,
            self.tls_key_file,
            self.tls_trust_certs_file,
            self.tls_allow_insecure,
            self.tls_validate_hostname,
        )

    def client_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``pulsar.Client`` (minus the logger)."""
        arguments: dict[str, Any] = {
            # pulsar-client takes whole seconds here; round up so that a small value
            # never becomes 0 (which would mean "no timeout").
            "operation_timeout_seconds": max(1, math.ceil(self.operation_timeout)),
            "connection_timeout_ms": max(1, round(self.connect_timeout * 1000)),
            "io_threads": self.io_threads,
            "tls_allow_insecure_connection": self.tls_allow_insecure,
            "tls_validate_hostname": self.tls_validate_hostname,
        }
        if self.tls_trust_certs_file:
            arguments["tls_trust_certs_file_path"] = self.tls_trust_certs_file
        authentication = self.authentication()
        if authentication is not None:
            arguments["authentication"] = authentication
        return arguments

    def authentication(self) -> pulsar.Authentication | None:
        """The one authentication method configured, if any."""
        if self.token is not None:
            return pulsar.AuthenticationToken(self.token)
        if self.token_file is not None:
            path = Path(self.token_file)
            # Read on every (re)connection, so that a rotated token is picked up.
            return pulsar.AuthenticationToken(lambda: path.read_text().strip())
        if self.oauth2 is not None:
            return pulsar.AuthenticationOauth2(self.oauth2)
        if self.basic_username is not None:
            return pulsar.AuthenticationBasic(self.basic_username, self.basic_password or "")
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            return pulsar.AuthenticationTLS(self.tls_cert_file, self.tls_key_file)
        return None


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _is_host_port(server: str) -> bool:
    try:
        host_port(server, DEFAULT_PORT)
    except ValueError:
        return False
    return True


def _positive_float(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a number of seconds greater than 0")
    return number


def _non_negative_float(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError("must be a number of seconds, 0 or more")
    return number


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("must be a whole number")
    number = int(value)
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    try:
        return option_flag(str(value))
    except ValueError:
        raise ValueError("must be true or false") from None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("must be a non-empty string")
    return value


def _log_level(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
    return text


def _oauth2(value: Any) -> str:
    # pulsar-client wants the parameters as a JSON string; accept a table too.
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    text = _text(value)
    try:
        json.loads(text)
    except ValueError:
        raise ValueError(
            'must be a JSON object such as {"issuer_url": ..., "private_key": ..., "audience": ...}'
        ) from None
    return text


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "connect_timeout": _positive_float,
    "operation_timeout": _positive_float,
    "nack_redelivery_delay": _non_negative_float,
    "receiver_queue_size": _positive_int,
    "max_pending_messages": _positive_int,
    "max_message_size": _positive_int,
    "batching_delay": _non_negative_float,
    "confirm_non_persistent": _boolean,
    "io_threads": _positive_int,
    "client_log_level": _log_level,
    "token": _text,
    "token_file": _text,
    "oauth2": _oauth2,
    "basic_username": _text,
    "basic_password": _text,
    "tls_cert_file": _text,
    "tls_key_file": _text,
    "tls_trust_certs_file": _text,
    "tls_allow_insecure": _boolean,
    "tls_validate_hostname": _boolean,
}
assert set(_PARSERS) == {f.name for f in fields(PulsarOptions)} - {"service_url"}

OPTION_NAMES: tuple[str, ...] = tuple(sorted(_PARSERS))


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> PulsarOptions:
    """Validate ``url`` and ``options`` (query string first, then the mapping on top)."""
    parts = urlsplit(url)
    where = f"broker URL {_strip_userinfo(url)!r}"
    problems: list[Problem] = []
    if parts.scheme not in SCHEMES:
        problems.append(
            Problem(
                where, "", "is not a Pulsar URL; use pulsar://host:6650 or pulsar+ssl://host:6651"
            )
        )
    if "@" in parts.netloc:
        problems.append(
            Problem(
                where,
                "",
                "carries credentials; pass them as options instead "
                "(token, token_file, basic_username/basic_password, oauth2)",
            )
        )
    elif not parts.netloc:
        problems.append(Problem(where, "", "names no host; use pulsar://host:6650"))
    else:
        problems.extend(
            Problem(
                where,
                "",
                f"lists {host.strip()!r}, which is not host[:port]; list brokers as "
                "pulsar://host:6650,host:6650",
            )
            for host in parts.netloc.split(",")
            if not _is_host_port(host)
        )
    raw: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    raw.update(options or {})

    values: dict[str, Any] = {}
    for name, value in raw.items():
        parser = _PARSERS.get(name)
        if parser is None:
            problems.append(
                Problem(where, name, f"is not a Pulsar option; known: {', '.join(OPTION_NAMES)}")
            )
            continue
        try:
            values[name] = parser(value)
        except (TypeError, ValueError) as exc:
            shown = "(hidden)" if name in _SECRET_OPTIONS else repr(value)
            problems.append(Problem(where, name, f"{shown} {exc}"))

    methods = [
        label
        for label, present in (
            ("token", "token" in values),
            ("token_file", "token_file" in values),
            ("oauth2", "oauth2" in values),
            ("basic_username", "basic_username" in values),
            ("tls_cert_file/tls_key_file", "tls_cert_file" in values),
        )
        if present
    ]
    if len(methods) > 1:
        problems.append(
            Problem(
                where, "", f"sets several authentication methods ({', '.join(methods)}); pick one"
            )
        )
    if ("tls_cert_file" in values) != ("tls_key_file" in values):
        problems.append(
            Problem(where, "tls_cert_file", "and tls_key_file must be given together (mutual TLS)")
        )
    if "basic_password" in values and "basic_username" not in values:
        problems.append(Problem(where, "basic_password", "needs basic_username"))
    if problems:
        raise BrokerOptionError(problems)

    service_url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return PulsarOptions(service_url=service_url, **values)
