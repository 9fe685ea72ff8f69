"""Connection and delivery options: parsed from the broker URL and from configuration.

URL form::

    nats://[user:password@|token@]host[:port][,host[:port]...][?option=value&...]
    nats+tls://...            (the same, with TLS required)

Every option can be given as a query parameter or in the ``options`` mapping
handed to :func:`toolbus_nats.connect` (configuration wins over the URL, so a
secret can stay out of the URL). Unknown option names are rejected, so a typo
fails loudly instead of being ignored.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from toolbus.broker_options import host_port, split_url
from toolbus.domain._moved import renamed
from toolbus.domain.errors import BrokerOptionError
from toolbus.settings import option_flag

DEFAULT_PORT = 4222
SCHEMES = ("nats", "nats+tls")


@dataclass(frozen=True, slots=True)
class NatsOptions:
    """Everything :func:`toolbus_nats.connect` needs; see ``docs/adapters/nats.md``."""

    servers: tuple[str, ...] = ("127.0.0.1:4222",)
    #: Connection name shown by the server's monitoring.
    name: str | None = None
    # -- authentication -------------------------------------------------------
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    #: Path of a ``.creds`` file (JWT + NKey seed), as issued by ``nsc``.
    credentials: str | None = None
    #: Path of a file holding an NKey seed.
    nkey_seed: str | None = None
    # -- TLS ------------------------------------------------------------------
    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_hostname: str | None = None
    tls_handshake_first: bool = False
    # -- connection -------------------------------------------------------------
    connect_timeout: float = 5.0
    #: Try the servers in random order, which spreads clients over a cluster;
    #: false tries them in the order given (a preferred, nearby node first).
    randomize: bool = True
    reconnect_wait: float = 1.0
    #: -1: keep trying for ever (a service outlives a broker restart).
    max_reconnect_attempts: int = -1
    #: Bytes of outgoing messages kept while reconnecting; beyond it publishing fails.
    reconnect_buffer: int = 32 * 1024 * 1024
    # -- JetStream (persistent queues) ---------------------------------------------
    #: Seconds a delivery may stay unacknowledged before JetStream redelivers it.
    #: A subscriber that is alive keeps its deliveries from expiring (it reports
    #: progress), so this is how long a *dead* consumer holds a message up.
    ack_wait: float = 30.0
    #: Ask JetStream to confirm each ack, and send it again until it does (for up
    #: to ``ack_wait``): an ack lost while a cluster moves a consumer's leadership
    #: would otherwise bring the message back, maybe to another replica.
    confirm_acks: bool = True
    #: Deliveries before a message goes to the dead-letter subject.
    max_deliveries: int = 5
    #: Messages a subscription asks JetStream for ahead of use.
    pull_batch: int = 64
    #: ``file`` or ``memory``.
    storage: str = "file"
    replicas: int = 1
    #: Seconds a message may wait in a stream for its consumers; 0 = no limit.
    max_age: float = 0.0
    #: Seconds dead letters are kept; 0 = no limit.
    dead_letter_max_age: float = 7 * 24 * 3600.0
    #: Seconds to wait for JetStream to confirm a stored message.
    publish_timeout: float = 10.0
    #: Seconds an abandoned fan-out consumer survives its subscriber (a process
    #: that died cannot delete it).
    fanout_inactive_threshold: float = 60.0

    def __post_init__(self) -> None:
        if not self.servers:
            raise BrokerOptionError("NATS options: at least one server (host:port) is needed")
        if self.storage not in ("file", "memory"):
            raise BrokerOptionError(
                f"NATS option 'storage' is {self.storage!r}; use 'file' or 'memory'"
            )
        for name in ("ack_wait", "publish_timeout", "connect_timeout", "fanout_inactive_threshold"):
            if getattr(self, name) <= 0:
                raise BrokerOptionError(
                    f"NATS option {name!r} must be a positive number of seconds"
                )
        for name in ("max_deliveries", "pull_batch", "replicas"):
            if getattr(self, name) < 1:
                raise BrokerOptionError(f"NATS option {name!r} must be at least 1")
        if self.pull_batch > 256:
            raise BrokerOptionError(
                "NATS option 'pull_batch' may be at most 256 (a JetStream limit)"
            )

    def server_urls(self) -> list[str]:
        """Server URLs for nats-py, without credentials (those go separately)."""
        scheme = "tls" if self.tls else "nats"
        return [f"{scheme}://{server}" for server in self.servers]

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context these options ask for, or None for plain TCP."""
        if not (self.tls or self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        elif self.tls_key:
            raise BrokerOptionError(
                "NATS option 'tls_key' needs 'tls_cert' (the client certificate)"
            )
        return context

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (callbacks excluded)."""
        kwargs: dict[str, Any] = {
            "servers": self.server_urls(),
            "name": self.name,
            "connect_timeout": self.connect_timeout,
            "reconnect_time_wait": self.reconnect_wait,
            "max_reconnect_attempts": self.max_reconnect_attempts,
            "pending_size": self.reconnect_buffer,
            "allow_reconnect": True,
            "dont_randomize": not self.randomize,
        }
        if self.user is not None:
            kwargs["user"] = self.user
            kwargs["password"] = self.password or ""
        if self.token is not None:
            kwargs["token"] = self.token
        if self.credentials:
            kwargs["user_credentials"] = self.credentials
        if self.nkey_seed:
            kwargs["nkeys_seed"] = self.nkey_seed
        context = self.ssl_context()
        if context is not None:
            kwargs["tls"] = context
            if self.tls_hostname:
                kwargs["tls_hostname"] = self.tls_hostname
            kwargs["tls_handshake_first"] = self.tls_handshake_first
        return kwargs


# Each option's type, read from the dataclass ("float", "str | None", ...).
_TYPES: dict[str, type] = {
    f.name: {"bool": bool, "int": int, "float": float}.get(str(f.type).split(" ")[0], str)
    for f in fields(NatsOptions)
    if f.name != "servers"
}
_PARSERS: dict[type, Callable[[str], Any]] = {bool: option_flag, int: int, float: float, str: str}
OPTION_NAMES = frozenset(_TYPES)


def _convert(name: str, value: Any) -> Any:
    """``value`` as option ``name``'s type: text is parsed, typed values are checked."""
    expected = _TYPES.get(name)
    if expected is None:
        raise BrokerOptionError(
            f"unknown NATS option {name!r}; known options: {', '.join(sorted(OPTION_NAMES))}"
        )
    if isinstance(value, str):
        try:
            return _PARSERS[expected](value)
        except ValueError as exc:
            raise BrokerOptionError(f"NATS option {name!r}: {exc}") from None
    # Configuration (TOML) may already hold numbers and booleans.
    if expected is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    raise BrokerOptionError(
        f"NATS option {name!r} must be {expected.__name__}, not {type(value).__name__}"
    )


def _servers(listed: str) -> tuple[str, ...]:
    """``host[:port],...`` (each may also be written ``nats://host:port``) as ``host:port``s."""
    servers = []
    for part in listed.split(","):
        scheme, separator, rest = part.strip().partition("://")
        try:
            servers.append(
                host_port(rest if separator and scheme in ("nats", "tls") else part, DEFAULT_PORT)
            )
        except ValueError:
            raise BrokerOptionError(
                f"NATS server {part.strip()!r} is not host[:port]; list servers as "
                "host:port,host:port"
            ) from None
    return tuple(servers)


def _server_list(value: Any) -> tuple[str, ...]:
    """The ``servers`` option: a comma-separated string or a list of strings."""
    if isinstance(value, str):
        return _servers(value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return _servers(",".join(value))
    raise BrokerOptionError(
        f"NATS option 'servers' must be a list of host:port strings, not {value!r}; "
        'for example ["nats-1:4222", "nats-2:4222", "nats-3:4222"]'
    )


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> NatsOptions:
    """Read ``url`` and ``options`` into :class:`NatsOptions` (``options`` wins)."""
    parts = split_url(url, "NATS")
    if parts.scheme not in SCHEMES:
        raise BrokerOptionError(
            f"not a NATS URL: {url!r}; use nats://host:port[,host:port] or nats+tls://..."
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    if not hosts:
        raise BrokerOptionError(f"NATS URL {url!r} names no server; use nats://host:port")
    values["servers"] = _servers(hosts)
    if userinfo:
        user, colon, password = userinfo.partition(":")
        if colon:
            values["user"], values["password"] = unquote(user), unquote(password)
        else:
            values["token"] = unquote(user)
    if parts.scheme == "nats+tls":
        values["tls"] = True
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        values[name] = _convert(name, value)
    for name, value in (options or {}).items():
        if name == "servers":
            values["servers"] = _server_list(value)
        else:
            values[name] = _convert(name, value)
    return replace(NatsOptions(), **values)


if TYPE_CHECKING:
    # Deprecated name, handed out by __getattr__ with a warning.
    NatsOptionError = BrokerOptionError


def __getattr__(name: str) -> Any:
    return renamed(__name__, name)
