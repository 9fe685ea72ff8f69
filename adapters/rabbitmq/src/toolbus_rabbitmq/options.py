"""Connection, queue and delivery options: read from the broker URL and from configuration.

URL form::

    rabbitmq://[user[:password]@]host[:port][,host[:port]...][/vhost][?option=value&...]
    amqp://...                  (the same)
    amqps://...                 (the same, with TLS; default port 5671)

The path is the virtual host, percent-encoded as in RabbitMQ's own URIs
(``/%2F`` and no path at all both mean the default vhost ``/``). Every option
may be given as a query parameter or in the ``options`` mapping handed to
:func:`toolbus_rabbitmq.connect`; the mapping wins, so secrets can stay out of
URLs. :class:`RabbitMQOptions` describes them, and :func:`parse_options` reads
the URL like every broker's
(:func:`~toolbus._internal.broker_options.parse_broker_url`): an unknown option
name is rejected, so a typo fails loudly, and every problem is reported at
once. What the TLS and credential options become is
:mod:`toolbus_rabbitmq.security`'s business; ``docs/adapters/rabbitmq.md``
explains each option.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar
from urllib.parse import unquote

from toolbus._internal.broker_options import (
    PositiveInt,
    PositiveSeconds,
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

DEFAULT_PORT = 5672
TLS_PORT = 5671
SCHEMES = ("rabbitmq", "amqp", "amqps")
#: RabbitMQ's own ceiling for a message (its ``max_message_size`` may be set up to this).
BROKER_MAX_MESSAGE = 512 * 1024 * 1024


class RabbitMQOptions(TlsOptions):
    """Everything :func:`toolbus_rabbitmq.connect` needs; see ``docs/adapters/rabbitmq.md``."""

    broker: ClassVar[str] = "RabbitMQ"
    schemes: ClassVar[tuple[str, ...]] = SCHEMES
    tls_schemes: ClassVar[tuple[str, ...]] = ("amqps",)
    default_port: ClassVar[int] = DEFAULT_PORT
    tls_default_port: ClassVar[int] = TLS_PORT
    url_form: ClassVar[str] = (
        "amqp://host:port[,host:port][/vhost], amqps://... (TLS) or rabbitmq://..."
    )
    servers_option: ClassVar[str | None] = "servers"

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
    # -- TLS (tls, tls_ca, tls_cert, tls_key, tls_check_hostname: TlsOptions) ------------
    #: The password of an encrypted ``tls_key``.
    tls_key_password: SecretText = None
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

    @classmethod
    def from_userinfo(cls, user: str, password: str | None) -> dict[str, Any] | str:
        # amqp://user:password@host, or amqp://user@host with the password given apart
        return {"user": user, "password": password or None}

    @classmethod
    def from_path(cls, path: str) -> dict[str, Any] | str:
        # The vhost, percent-encoded as in RabbitMQ's URIs; none, "/" and "/%2F" are "/".
        if path in ("", "/"):
            return {}
        return {"vhost": unquote(path[1:])}

    def conflicts(self) -> Iterator[tuple[str, str]]:
        yield from super().conflicts()
        given = [
            name
            for name in ("password", "password_env", "password_file")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            yield "", f"sets the password in {len(given)} ways ({', '.join(given)}); pick one"
        if given and self.user is None:
            yield "user", "is missing: a password was given for no user"


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> RabbitMQOptions:
    """Read ``url`` and ``options`` into :class:`RabbitMQOptions` (``options`` wins)."""
    return parse_broker_url(RabbitMQOptions, url, options)
