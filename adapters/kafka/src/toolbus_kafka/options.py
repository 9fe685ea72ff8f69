"""Connection, topic, group and latency options: read from the broker URL and from configuration.

URL form::

    kafka://[user:password@]host[:port][,host[:port]...][?option=value&...]

Every option may be given as a query parameter or in the ``options`` mapping
handed to :func:`toolbus_kafka.connect`; the mapping wins, so secrets can stay
out of URLs (and out of logs). Unknown option names are rejected so that a typo
fails loudly instead of being ignored. ``docs/adapters/kafka.md`` explains each
option and its trade-offs.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from toolbus.broker_options import host_port, split_url
from toolbus.domain._moved import renamed
from toolbus.domain.errors import BrokerOptionError
from toolbus.settings import option_flag

DEFAULT_PORT = 9092
SCHEME = "kafka"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")


@dataclass(frozen=True, slots=True)
class KafkaOptions:
    """Everything :func:`toolbus_kafka.connect` needs."""

    bootstrap_servers: tuple[str, ...] = ("127.0.0.1:9092",)
    #: Shown in the broker's logs and quotas.
    client_id: str = "toolbus"
    # -- topics ---------------------------------------------------------------
    #: Partitions of each topic toolbus creates: the most replicas of one service
    #: that can work at the same time.
    partitions: int = 4
    #: Copies of each partition toolbus creates; use 3 on a production cluster.
    replication_factor: int = 1
    #: Largest body accepted by ``publish``; topics are created with this as
    #: their ``max.message.bytes``.
    max_message_size: int = 8 * 1024 * 1024
    # -- producing ------------------------------------------------------------
    #: ``all`` (every in-sync replica has the message), ``1`` (the leader has it) or ``0``.
    acks: str = "all"
    #: Milliseconds the producer waits to batch messages; 0 sends at once.
    linger_ms: int = 0
    # -- consuming -------------------------------------------------------------
    #: Longest a fetch waits on the broker for data, for fan-out subscriptions
    #: (the response queues clients read). Low is fast, and costs idle fetches.
    fanout_fetch_max_wait_ms: int = 10
    #: The same for group subscriptions (the request queues services read).
    group_fetch_max_wait_ms: int = 100
    #: A group member that sends no heartbeat for this long is considered dead.
    session_timeout_ms: int = 10_000
    #: How often members heartbeat; also how soon a member notices a rebalance.
    heartbeat_interval_ms: int = 1_000
    #: How long the group waits for members to rejoin during a rebalance. A member
    #: that gives up partitions lets its calls in flight finish first, for up to
    #: this long minus two heartbeats.
    rebalance_timeout_ms: int = 60_000
    #: Acked offsets are committed at most this often (0: after every ack).
    commit_interval_ms: int = 100
    #: Deliveries a subscription reads ahead of its consumer.
    prefetch: int = 256
    #: Milliseconds before a request to the broker is given up.
    request_timeout_ms: int = 40_000
    # -- security -------------------------------------------------------------
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = field(default=None, repr=False)
    sasl_password: str | None = field(default=None, repr=False)
    #: For OAUTHBEARER: an ``aiokafka.abc.AbstractTokenProvider`` (configuration only).
    sasl_oauth_token_provider: Any = field(default=None, repr=False)
    sasl_kerberos_service_name: str = "kafka"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise BrokerOptionError("Kafka URL names no broker; use kafka://host:port")
        if self.acks not in ("all", "-1", "0", "1"):
            raise BrokerOptionError(f"Kafka option 'acks' is {self.acks!r}; use all, 1 or 0")
        for name in ("partitions", "replication_factor", "max_message_size", "prefetch"):
            if getattr(self, name) < 1:
                raise BrokerOptionError(f"Kafka option {name!r} must be at least 1")
        for name in (
            "linger_ms",
            "fanout_fetch_max_wait_ms",
            "group_fetch_max_wait_ms",
            "commit_interval_ms",
        ):
            if getattr(self, name) < 0:
                raise BrokerOptionError(f"Kafka option {name!r} must not be negative")
        for name in (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "rebalance_timeout_ms",
            "request_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise BrokerOptionError(f"Kafka option {name!r} must be a positive duration")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise BrokerOptionError(
                "Kafka option 'heartbeat_interval_ms' must be below 'session_timeout_ms' "
                "(a third of it is usual)"
            )
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise BrokerOptionError(
                f"Kafka option 'security_protocol' is {self.security_protocol!r}; "
                f"use one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise BrokerOptionError(
                f"Kafka option 'sasl_mechanism' is {self.sasl_mechanism!r}; "
                f"use one of {', '.join(SASL_MECHANISMS)}"
            )
        if self.sasl_username is not None and not self.security_protocol.startswith("SASL_"):
            # Never send a password where the user did not ask for SASL.
            raise BrokerOptionError(
                "Kafka credentials were given but 'security_protocol' is "
                f"{self.security_protocol}; set security_protocol=SASL_SSL "
                "(or SASL_PLAINTEXT on a trusted network)"
            )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise BrokerOptionError(
                "Kafka option 'ssl_keyfile' needs 'ssl_certfile' (the client certificate)"
            )

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def acks_setting(self) -> int | str:
        """``acks`` as aiokafka takes it."""
        return self.acks if self.acks == "all" else int(self.acks)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL and SASL_SSL, from the system's CAs unless ``ssl_cafile``."""
        if not self.uses_ssl:
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_password)
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """Connection keyword arguments shared by aiokafka's producer, consumer and admin."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": list(self.bootstrap_servers),
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
            "security_protocol": self.security_protocol,
        }
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.security_protocol.startswith("SASL_"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
            kwargs["sasl_kerberos_service_name"] = self.sasl_kerberos_service_name
            if self.sasl_oauth_token_provider is not None:
                kwargs["sasl_oauth_token_provider"] = self.sasl_oauth_token_provider
        return kwargs


def _text(text: str) -> str:
    return text


def _object_only(text: str) -> Any:
    raise ValueError("takes an object, so it can only be given in the options mapping")


def _converter(annotation: str) -> Callable[[str], Any]:
    if annotation.startswith("bool"):
        return option_flag
    if annotation.startswith("int"):
        return int
    if annotation == "Any":
        return _object_only
    return _text


# Options come from URLs as text; configuration may already hold typed values.
_CONVERTERS: dict[str, Callable[[str], Any]] = {
    option.name: _converter(str(option.type))
    for option in fields(KafkaOptions)
    if option.name != "bootstrap_servers"
}
_CONVERTERS["acks"] = _text
OPTION_NAMES = frozenset(_CONVERTERS)


def _convert(name: str, value: Any) -> Any:
    converter = _CONVERTERS.get(name)
    if converter is None:
        raise BrokerOptionError(
            f"unknown Kafka option {name!r}; known options: {', '.join(sorted(OPTION_NAMES))}"
        )
    if name == "acks":
        return str(value)
    if not isinstance(value, str):
        return value
    try:
        return converter(value)
    except ValueError as exc:
        raise BrokerOptionError(f"Kafka option {name!r}: {exc}") from None


def _servers(hosts: str) -> tuple[str, ...]:
    servers = []
    for part in hosts.split(","):
        try:
            servers.append(host_port(part, DEFAULT_PORT))
        except ValueError:
            raise BrokerOptionError(
                f"Kafka broker {part.strip()!r} is not host[:port]; list bootstrap servers "
                "as host:port,host:port"
            ) from None
    return tuple(servers)


def _server_list(value: Any) -> tuple[str, ...]:
    """The ``bootstrap_servers`` option: a comma-separated string or a list of strings."""
    if isinstance(value, str):
        return _servers(value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return _servers(",".join(value))
    raise BrokerOptionError(
        f"Kafka option 'bootstrap_servers' must be a list of host:port strings, not {value!r}; "
        'for example ["kafka-1:9092", "kafka-2:9092", "kafka-3:9092"]'
    )


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> KafkaOptions:
    """Read ``url`` and ``options`` into :class:`KafkaOptions` (``options`` wins)."""
    parts = split_url(url, "Kafka")
    if parts.scheme != SCHEME:
        raise BrokerOptionError(
            f"not a Kafka URL: {parts.scheme}://...; use kafka://host:port[,host:port]"
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    if hosts:
        values["bootstrap_servers"] = _servers(hosts)
    elif "bootstrap_servers" not in (options or {}):
        raise BrokerOptionError(
            "the Kafka URL names no broker; use kafka://host:port[,host:port] "
            "(or the bootstrap_servers option)"
        )
    if userinfo:
        user, _, password = userinfo.partition(":")
        values["sasl_username"] = unquote(user)
        values["sasl_password"] = unquote(password)
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        values[name] = _convert(name, value)
    for name, value in (options or {}).items():
        if name == "bootstrap_servers":
            values[name] = _server_list(value)
        else:
            values[name] = _convert(name, value)
    return KafkaOptions(**values)


if TYPE_CHECKING:
    # Deprecated name, handed out by __getattr__ with a warning.
    KafkaOptionsError = BrokerOptionError


def __getattr__(name: str) -> Any:
    return renamed(__name__, name)
