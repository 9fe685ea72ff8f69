"""Connection, queue and delivery options: read from the broker URL and from configuration.

URL form::

    rabbitmq://[user[:password]@]host[:port][,host[:port]...][/vhost][?option=value&...]
    amqp://...                  (the same)
    amqps://...                 (the same, with TLS; default port 5671)

The path is the virtual host, percent-encoded as in RabbitMQ's own URIs
(``/%2F`` and no path at all both mean the default vhost ``/``). Every option
may be given as a query parameter or in the ``options`` mapping handed to
:func:`toolbus_rabbitmq.connect`; the mapping wins, so secrets can stay out of
URLs. :class:`RabbitMQOptions` describes them, read by the core's
:func:`~toolbus._internal.broker_options.parse_broker_options` like every
broker's: an unknown option name is rejected, so a typo fails loudly, and every
problem is reported at once. ``docs/adapters/rabbitmq.md`` explains each option.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar
from urllib.parse import unquote

from toolbus._internal.broker_options import (
    BrokerOptions,
    Flag,
    PositiveInt,
    PositiveSeconds,
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
from toolbus.domain.errors import Problem

DEFAULT_PORT = 5672
TLS_PORT = 5671
SCHEMES = ("rabbitmq", "amqp", "amqps")
#: RabbitMQ's own ceiling for a message (its ``max_message_size`` may be set up to this).
BROKER_MAX_MESSAGE = 512 * 1024 * 1024


class RabbitMQOptions(BrokerOptions):
    """Everything :func:`toolbus_rabbitmq.connect` needs; see ``docs/adapters/rabbitmq.md``."""

    broker: ClassVar[str] = "RabbitMQ"

    #: ``host:port``s of the cluster's nodes, tried in turn.
    servers: Annotated[tuple[str, ...], server_list(DEFAULT_PORT)] = ("127.0.0.1:5672",)
    #: The virtual host.
    vhost: Text = "/"
    #: Connection name shown by the management UI and ``rabbitmqctl list_connections``.
    name: Text | None = None
    # -- credentials (see toolbus_rabbitmq.security) ---------------------------------------
    user: SecretText = None
    password: SecretText = None
    #: The name of an environment variable holding the password.
    password_env: Text | None = None
    #: The path of a file holding the password (a trailing newline is ignored).
    password_file: Text | None = None
    # -- TLS ------------------------------------------------------------------------------
    tls: Flag = False
    #: CA file to verify the server with (default: the system's trust store).
    tls_ca: Text | None = None
    #: Client certificate and key, for mutual TLS.
    tls_cert: Text | None = None
    tls_key: Text | None = None
    # -- connection -------------------------------------------------------------------------
    connect_timeout: PositiveSeconds = 5.0
    #: Seconds between reconnection attempts while the broker is away (for ever).
    reconnect_interval: PositiveSeconds = 1.0
    #: AMQP heartbeat timeout in seconds (0: none); a dead peer is noticed within it.
    heartbeat: Annotated[WholeNumber, at_least(0), at_most(65535, " (an AMQP limit)")] = 60
    # -- queues and delivery ------------------------------------------------------------------
    #: Deliveries a subscription holds unacknowledged. On persistent queues that is
    #: the calls a replica runs or holds at once; on non-persistent ones, those
    #: waiting in its buffer.
    prefetch: Annotated[PositiveInt, at_most(65535, " (an AMQP limit)")] = 64
    #: The kind of queue a group gets on a ``persistent://`` queue: ``classic``
    #: (on one node) or ``quorum`` (replicated over the cluster).
    queue_type: Annotated[str, one_of("classic", "quorum")] = "classic"
    #: Seconds a publish to a persistent queue waits for the broker's confirmation,
    #: sending again across a reconnection, before it fails.
    publish_timeout: PositiveSeconds = 10.0
    #: Largest body ``publish`` accepts (the broker's own ``max_message_size``
    #: must allow it: 128 MiB by default).
    max_message_size: Annotated[PositiveInt, at_most(BROKER_MAX_MESSAGE, " (RabbitMQ's limit)")] = (
        16 * 1024 * 1024
    )

    def conflicts(self) -> Iterator[tuple[str, str]]:
        given = [
            name
            for name in ("password", "password_env", "password_file")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            yield "", f"sets the password in {len(given)} ways ({', '.join(given)}); pick one"
        if given and self.user is None:
            yield "user", "is missing: a password was given for no user"
        if self.tls_key and not self.tls_cert:
            yield "tls_key", "needs 'tls_cert' (the client certificate)"
        if self.tls_cert and not self.tls_key:
            yield "tls_cert", "needs 'tls_key' (the client certificate's private key)"

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.tls_ca is not None or self.tls_cert is not None


OPTION_NAMES = frozenset(RabbitMQOptions.model_fields)


def _vhost(path: str) -> str | None:
    """The vhost a URL's path names, None for none (RabbitMQ's URI rules)."""
    if path in ("", "/"):
        return None
    return unquote(path[1:])


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> RabbitMQOptions:
    """Read ``url`` and ``options`` into :class:`RabbitMQOptions` (``options`` wins)."""
    parts = split_url(url, "RabbitMQ", DEFAULT_PORT)
    where = broker_url_where(parts)
    problems: list[Problem] = []
    if parts.scheme not in SCHEMES:
        problems.append(
            Problem(
                where,
                "",
                "is not a RabbitMQ URL; use amqp://host:port[,host:port][/vhost], "
                "amqps://... (TLS) or rabbitmq://...",
            )
        )
    tls = parts.scheme == "amqps"
    default_port = TLS_PORT if tls else DEFAULT_PORT
    userinfo, _, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    if hosts:
        values["servers"], bad = url_servers(
            hosts,
            default_port,
            where,
            lambda server: (
                f"RabbitMQ node {server!r} is not host[:port]; list nodes as host:port,host:port"
            ),
        )
        problems += bad
    elif "servers" not in (options or {}):
        problems.append(
            Problem(where, "", "names no node; use amqp://host:port (or the servers option)")
        )
    if userinfo:
        user, colon, password = userinfo.partition(":")
        values["user"] = unquote(user)
        if colon and password:
            values["password"] = unquote(password)
    vhost = _vhost(parts.path)
    if vhost is not None:
        values["vhost"] = vhost
    if tls:
        values["tls"] = True
    return parse_broker_options(
        RabbitMQOptions, parts.query, options, where=where, url_values=values, problems=problems
    )
