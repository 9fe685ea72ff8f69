"""Connection and delivery options: read from the broker URL and from configuration.

URL form::

    nats://[user:password@|token@]host[:port][,host[:port]...][?option=value&...]
    nats+tls://...            (the same, with TLS required)

Every option can be given as a query parameter or in the ``options`` mapping
handed to :func:`toolbus_nats.connect` (configuration wins over the URL, so a
secret can stay out of the URL). :class:`NatsOptions` describes them, and
:func:`parse_options` reads the URL like every broker's
(:func:`~toolbus._internal.broker_options.parse_broker_url`): an unknown option
name is rejected, so a typo fails loudly instead of being ignored, and every
problem is reported at once. What the TLS and credential options become is
:mod:`toolbus_nats.security`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from toolbus._internal.broker_options import (
    Flag,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SecretText,
    Text,
    WholeNumber,
    at_least,
    at_most,
    one_of,
    parse_broker_url,
    server_list,
)
from toolbus._internal.broker_tls import TlsOptions

DEFAULT_PORT = 4222
SCHEMES = ("nats", "nats+tls")


class NatsOptions(TlsOptions):
    """Everything :func:`toolbus_nats.connect` needs; see ``docs/adapters/nats.md``."""

    broker: ClassVar[str] = "NATS"
    schemes: ClassVar[tuple[str, ...]] = SCHEMES
    tls_schemes: ClassVar[tuple[str, ...]] = ("nats+tls",)
    default_port: ClassVar[int] = DEFAULT_PORT
    url_form: ClassVar[str] = "nats://host:port[,host:port] or nats+tls://..."
    servers_option: ClassVar[str | None] = "servers"

    #: ``host:port``s; in configuration also ``nats://`` or ``tls://`` URLs.
    servers: Annotated[tuple[str, ...], server_list(DEFAULT_PORT, schemes=("nats", "tls"))] = (
        "127.0.0.1:4222",
    )
    #: Connection name shown by the server's monitoring.
    name: Text | None = None
    # -- authentication -------------------------------------------------------
    user: SecretText = None
    password: SecretText = None
    token: SecretText = None
    #: Path of a ``.creds`` file (JWT + NKey seed), as issued by ``nsc``.
    credentials: Text | None = None
    #: Path of a file holding an NKey seed.
    nkey_seed: Text | None = None
    # -- TLS (tls, tls_ca, tls_cert, tls_key, tls_check_hostname: TlsOptions) ---------
    #: The name to check the server's certificate against, when not the URL's host.
    tls_hostname: Text | None = None
    #: TLS before the server's ``INFO`` (servers with ``handshake_first``).
    tls_handshake_first: Flag = False
    # -- connection -------------------------------------------------------------
    connect_timeout: PositiveSeconds = 5.0
    #: Try the servers in random order, which spreads clients over a cluster;
    #: false tries them in the order given (a preferred, nearby node first).
    randomize: Flag = True
    reconnect_wait: Seconds = 1.0
    #: -1: keep trying for ever (a service outlives a broker restart).
    max_reconnect_attempts: WholeNumber = -1
    #: Bytes of outgoing messages kept while reconnecting; beyond it publishing fails.
    reconnect_buffer: Annotated[WholeNumber, at_least(0)] = 32 * 1024 * 1024
    # -- JetStream (persistent queues) ---------------------------------------------
    #: Seconds a delivery may stay unacknowledged before JetStream redelivers it.
    #: A subscriber that is alive keeps its deliveries from expiring (it reports
    #: progress), so this is how long a *dead* consumer holds a message up.
    ack_wait: PositiveSeconds = 30.0
    #: Ask JetStream to confirm each ack, and send it again until it does (for up
    #: to ``ack_wait``): an ack lost while a cluster moves a consumer's leadership
    #: would otherwise bring the message back, maybe to another replica.
    confirm_acks: Flag = True
    #: Deliveries before a message goes to the dead-letter subject.
    max_deliveries: PositiveInt = 5
    #: Messages a subscription asks JetStream for ahead of use.
    pull_batch: Annotated[PositiveInt, at_most(256, " (a JetStream limit)")] = 64
    #: ``file`` or ``memory``.
    storage: Annotated[str, one_of("file", "memory")] = "file"
    replicas: PositiveInt = 1
    #: Seconds a message may wait in a stream for its consumers; 0 = no limit.
    max_age: Seconds = 0.0
    #: Seconds dead letters are kept; 0 = no limit.
    dead_letter_max_age: Seconds = 7 * 24 * 3600.0
    #: Seconds to wait for JetStream to confirm a stored message.
    publish_timeout: PositiveSeconds = 10.0
    #: Seconds an abandoned fan-out consumer survives its subscriber (a process
    #: that died cannot delete it).
    fanout_inactive_threshold: PositiveSeconds = 60.0

    def server_urls(self) -> list[str]:
        """Server URLs for nats-py, without credentials (those go separately)."""
        scheme = "tls" if self.tls else "nats"
        return [f"{scheme}://{server}" for server in self.servers]

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` but security and callbacks
        (credentials and TLS: :func:`toolbus_nats.security.security_kwargs`)."""
        return {
            "servers": self.server_urls(),
            "name": self.name,
            "connect_timeout": self.connect_timeout,
            "reconnect_time_wait": self.reconnect_wait,
            "max_reconnect_attempts": self.max_reconnect_attempts,
            "pending_size": self.reconnect_buffer,
            "allow_reconnect": True,
            "dont_randomize": not self.randomize,
        }

    @classmethod
    def from_userinfo(cls, user: str, password: str | None) -> dict[str, Any] | str:
        # nats://user:password@host, or nats://token@host
        if password is None:
            return {"token": user}
        return {"user": user, "password": password or None}


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> NatsOptions:
    """Read ``url`` and ``options`` into :class:`NatsOptions` (``options`` wins)."""
    return parse_broker_url(NatsOptions, url, options)
