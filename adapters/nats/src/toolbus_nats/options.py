"""Connection and delivery options: read from the broker URL and from configuration.

URL form::

    nats://[user:password@|token@]host[:port][,host[:port]...][?option=value&...]
    nats+tls://...            (the same, with TLS required)

Every option can be given as a query parameter or in the ``options`` mapping
handed to :func:`toolbus_nats.connect` (configuration wins over the URL, so a
secret can stay out of the URL). :class:`NatsOptions` describes them, read by
the core's :func:`~toolbus._internal.broker_options.parse_broker_options` like every
broker's: an unknown option name is rejected, so a typo fails loudly instead of
being ignored, and every problem is reported at once.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar
from urllib.parse import unquote

from toolbus._internal.broker_options import (
    BrokerOptions,
    Flag,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SecretText,
    Text,
    WholeNumber,
    at_least,
    at_most,
    broker_url_where,
    one_of,
    parse_broker_options,
    server_list,
    split_url,
    url_servers,
)
from toolbus.domain.errors import BrokerOptionError, Problem

DEFAULT_PORT = 4222
SCHEMES = ("nats", "nats+tls")


class NatsOptions(BrokerOptions):
    """Everything :func:`toolbus_nats.connect` needs; see ``docs/adapters/nats.md``."""

    broker: ClassVar[str] = "NATS"

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
    # -- TLS ------------------------------------------------------------------
    tls: Flag = False
    tls_ca: Text | None = None
    tls_cert: Text | None = None
    tls_key: Text | None = None
    tls_hostname: Text | None = None
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


OPTION_NAMES = frozenset(NatsOptions.model_fields)


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> NatsOptions:
    """Read ``url`` and ``options`` into :class:`NatsOptions` (``options`` wins)."""
    parts = split_url(url, "NATS", DEFAULT_PORT)
    where = broker_url_where(parts)
    problems: list[Problem] = []
    if parts.scheme not in SCHEMES:
        problems.append(
            Problem(
                where, "", "is not a NATS URL; use nats://host:port[,host:port] or nats+tls://..."
            )
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    if hosts:
        values["servers"], bad = url_servers(
            hosts,
            DEFAULT_PORT,
            where,
            lambda server: (
                f"NATS server {server!r} is not host[:port]; list servers as host:port,host:port"
            ),
        )
        problems += bad
    else:
        problems.append(Problem(where, "", "names no server; use nats://host:port"))
    if userinfo:
        user, colon, password = userinfo.partition(":")
        if colon:
            values["user"], values["password"] = unquote(user), unquote(password) or None
        else:
            values["token"] = unquote(user)
    if parts.scheme == "nats+tls":
        values["tls"] = True
    return parse_broker_options(
        NatsOptions, parts.query, options, where=where, url_values=values, problems=problems
    )
