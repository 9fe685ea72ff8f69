"""Connection, topic, group and latency options: read from the broker URL and from configuration.

URL form::

    kafka://[user:password@]host[:port][,host[:port]...][?option=value&...]

Every option may be given as a query parameter or in the ``options`` mapping
handed to :func:`toolbus_kafka.connect`; the mapping wins, so secrets can stay
out of URLs (and out of logs). :class:`KafkaOptions` describes them, read by the
core's :func:`~toolbus._internal.broker_options.parse_broker_options` like every broker's:
an unknown option name is rejected, so a typo fails loudly instead of being
ignored, and every problem is reported at once. ``docs/adapters/kafka.md``
explains each option and its trade-offs.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar
from urllib.parse import unquote

import pydantic

from toolbus._internal.broker_options import (
    BrokerOptions,
    Flag,
    PositiveInt,
    SecretText,
    Text,
    WholeNumber,
    at_least,
    bad_option,
    broker_url_where,
    one_of,
    parse_broker_options,
    server_list,
    split_url,
    url_servers,
)
from toolbus.domain.errors import Problem

DEFAULT_PORT = 9092
SCHEME = "kafka"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")

#: Milliseconds, 0 or more.
Milliseconds = Annotated[WholeNumber, at_least(0)]


def _object_only(value: object) -> Any:
    if isinstance(value, str):
        raise bad_option("takes an object, so it can only be given in the options mapping")
    return value


class KafkaOptions(BrokerOptions):
    """Everything :func:`toolbus_kafka.connect` needs."""

    broker: ClassVar[str] = "Kafka"

    bootstrap_servers: Annotated[tuple[str, ...], server_list(DEFAULT_PORT)] = ("127.0.0.1:9092",)
    #: Shown in the broker's logs and quotas.
    client_id: Text = "toolbus"
    # -- topics ---------------------------------------------------------------
    #: Partitions of each topic toolbus creates: the most replicas of one service
    #: that can work at the same time.
    partitions: PositiveInt = 4
    #: Copies of each partition toolbus creates; use 3 on a production cluster.
    replication_factor: PositiveInt = 1
    #: Largest body accepted by ``publish``; topics are created with this as
    #: their ``max.message.bytes``.
    max_message_size: PositiveInt = 8 * 1024 * 1024
    # -- producing ------------------------------------------------------------
    #: ``all`` (every in-sync replica has the message), ``1`` (the leader has it) or ``0``.
    acks: Annotated[str, one_of("all", "-1", "0", "1", listed="all, 1 or 0")] = "all"
    #: Milliseconds the producer waits to batch messages; 0 sends at once.
    linger_ms: Milliseconds = 0
    # -- consuming -------------------------------------------------------------
    #: Longest a fetch waits on the broker for data, for fan-out subscriptions
    #: (the response queues clients read). Low is fast, and costs idle fetches.
    fanout_fetch_max_wait_ms: Milliseconds = 10
    #: The same for group subscriptions (the request queues services read).
    group_fetch_max_wait_ms: Milliseconds = 100
    #: A group member that sends no heartbeat for this long is considered dead.
    session_timeout_ms: PositiveInt = 10_000
    #: How often members heartbeat; also how soon a member notices a rebalance.
    heartbeat_interval_ms: PositiveInt = 1_000
    #: How long the group waits for members to rejoin during a rebalance. A member
    #: that gives up partitions lets its calls in flight finish first, for up to
    #: this long minus two heartbeats.
    rebalance_timeout_ms: PositiveInt = 60_000
    #: Acked offsets are committed at most this often (0: after every ack).
    commit_interval_ms: Milliseconds = 100
    #: Deliveries a subscription reads ahead of its consumer.
    prefetch: PositiveInt = 256
    #: Milliseconds before a request to the broker is given up.
    request_timeout_ms: PositiveInt = 40_000
    # -- security -------------------------------------------------------------
    security_protocol: Annotated[str, one_of(*SECURITY_PROTOCOLS)] = "PLAINTEXT"
    sasl_mechanism: Annotated[str, one_of(*SASL_MECHANISMS)] = "PLAIN"
    sasl_username: SecretText = None
    sasl_password: SecretText = None
    #: For OAUTHBEARER: an ``aiokafka.abc.AbstractTokenProvider`` (configuration only).
    sasl_oauth_token_provider: Annotated[
        Any, pydantic.PlainValidator(_object_only), pydantic.Field(repr=False)
    ] = None
    sasl_kerberos_service_name: Text = "kafka"
    ssl_cafile: Text | None = None
    ssl_certfile: Text | None = None
    ssl_keyfile: Text | None = None
    ssl_password: SecretText = None
    ssl_check_hostname: Flag = True

    def conflicts(self) -> Iterator[tuple[str, str]]:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            yield (
                "heartbeat_interval_ms",
                "must be below 'session_timeout_ms' (a third of it is usual)",
            )
        if self.sasl_username is not None and not self.security_protocol.startswith("SASL_"):
            # Never send a password where the user did not ask for SASL.
            yield (
                "security_protocol",
                f"is {self.security_protocol}, but credentials were given; set "
                "security_protocol=SASL_SSL (or SASL_PLAINTEXT on a trusted network)",
            )
        if self.ssl_keyfile and not self.ssl_certfile:
            yield "ssl_keyfile", "needs 'ssl_certfile' (the client certificate)"

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


OPTION_NAMES = frozenset(KafkaOptions.model_fields)


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> KafkaOptions:
    """Read ``url`` and ``options`` into :class:`KafkaOptions` (``options`` wins)."""
    parts = split_url(url, "Kafka", DEFAULT_PORT)
    where = broker_url_where(parts)
    problems: list[Problem] = []
    if parts.scheme != SCHEME:
        problems.append(Problem(where, "", "is not a Kafka URL; use kafka://host:port[,host:port]"))
    userinfo, _, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    if hosts:
        values["bootstrap_servers"], bad = url_servers(
            hosts,
            DEFAULT_PORT,
            where,
            lambda server: (
                f"Kafka broker {server!r} is not host[:port]; list bootstrap servers "
                "as host:port,host:port"
            ),
        )
        problems += bad
    elif "bootstrap_servers" not in (options or {}):
        problems.append(
            Problem(
                where,
                "",
                "names no broker; use kafka://host:port[,host:port] "
                "(or the bootstrap_servers option)",
            )
        )
    if userinfo:
        user, _, password = userinfo.partition(":")
        values["sasl_username"] = unquote(user)
        values["sasl_password"] = unquote(password) or None
    return parse_broker_options(
        KafkaOptions, parts.query, options, where=where, url_values=values, problems=problems
    )
