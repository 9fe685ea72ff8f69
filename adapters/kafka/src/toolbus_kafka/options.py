"""Connection, topic, group and latency options: read from the broker URL and from configuration.

URL form::

    kafka://[user:password@]host[:port][,host[:port]...][?option=value&...]

Every option may be given as a query parameter or in the ``options`` mapping
handed to :func:`toolbus_kafka.connect`; the mapping wins, so secrets can stay
out of URLs (and out of logs). :class:`KafkaOptions` describes them, and
:func:`parse_options` reads the URL like every broker's
(:func:`~toolbus._internal.broker_options.parse_broker_url`): an unknown option
name is rejected, so a typo fails loudly instead of being ignored, and every
problem is reported at once. ``docs/adapters/kafka.md`` explains each option
and its trade-offs; what the TLS and SASL options become is
:mod:`toolbus_kafka.security`'s business.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar

import pydantic

from toolbus._internal.broker_options import (
    Flag,
    PositiveInt,
    SecretText,
    Text,
    WholeNumber,
    at_least,
    bad_option,
    one_of,
    parse_broker_url,
    server_list,
)
from toolbus._internal.broker_tls import TlsOptions

DEFAULT_PORT = 9092
SCHEME = "kafka"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")

#: Milliseconds, 0 or more.
Milliseconds = Annotated[WholeNumber, at_least(0)]


def _object_only(value: object) -> Any:
    if isinstance(value, str):
        raise bad_option("takes an object, so it can only be given in the options mapping")
    return value


class KafkaOptions(TlsOptions):
    """Everything :func:`toolbus_kafka.connect` needs."""

    broker: ClassVar[str] = "Kafka"
    schemes: ClassVar[tuple[str, ...]] = (SCHEME,)
    default_port: ClassVar[int] = DEFAULT_PORT
    url_form: ClassVar[str] = "kafka://host:port[,host:port]"
    servers_option: ClassVar[str | None] = "bootstrap_servers"

    bootstrap_servers: Annotated[tuple[str, ...], server_list(DEFAULT_PORT)] = ("127.0.0.1:9092",)
    #: Shown in the broker's logs and quotas.
    client_id: Text = "toolbus"
    # -- topics ---------------------------------------------------------------
    #: Partitions of each topic toolbus creates: the most replicas of one service
    #: that can work at the same time.
    partitions: PositiveInt = 4
    #: Partitions of each topic toolbus creates for answers (a response queue: one a
    #: client reads, or named as one). One keeps a stream's chunks in order whoever
    #: produces them; a fan-out reader reads every partition, so more buy nothing.
    response_partitions: PositiveInt = 1
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
    # -- security (tls, tls_ca, tls_cert, tls_key, tls_check_hostname: TlsOptions) --
    #: The password of an encrypted ``tls_key``.
    tls_key_password: SecretText = None
    #: Authenticate with SASL (``sasl_mechanism``, ``sasl_username``, ...); over TLS
    #: unless ``tls`` is off (a trusted network only: PLAIN sends the password as is).
    sasl: Flag = False
    sasl_mechanism: Annotated[str, one_of(*SASL_MECHANISMS)] = "PLAIN"
    sasl_username: SecretText = None
    sasl_password: SecretText = None
    #: For OAUTHBEARER: an ``aiokafka.abc.AbstractTokenProvider`` (configuration only).
    sasl_oauth_token_provider: Annotated[
        Any, pydantic.PlainValidator(_object_only), pydantic.Field(repr=False)
    ] = None
    sasl_kerberos_service_name: Text = "kafka"

    def conflicts(self) -> Iterator[tuple[str, str]]:
        yield from super().conflicts()
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            yield (
                "heartbeat_interval_ms",
                "must be below 'session_timeout_ms' (a third of it is usual)",
            )
        if self.sasl_username is not None and not self.sasl:
            # Never send a password where the user did not ask for SASL.
            yield (
                "sasl",
                "is off, but credentials were given; set sasl=true and tls=true (or "
                "sasl=true alone on a trusted network)",
            )

    @property
    def acks_setting(self) -> int | str:
        """``acks`` as aiokafka takes it."""
        return self.acks if self.acks == "all" else int(self.acks)

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by aiokafka's producer, consumer and admin client, but
        TLS and SASL (:func:`toolbus_kafka.security.security_kwargs`)."""
        return {
            "bootstrap_servers": list(self.bootstrap_servers),
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
        }

    @classmethod
    def from_userinfo(cls, user: str, password: str | None) -> dict[str, Any] | str:
        return {"sasl_username": user, "sasl_password": password or None}


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> KafkaOptions:
    """Read ``url`` and ``options`` into :class:`KafkaOptions` (``options`` wins)."""
    return parse_broker_url(KafkaOptions, url, options)
