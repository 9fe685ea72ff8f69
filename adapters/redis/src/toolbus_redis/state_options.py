"""The Redis state store's URL and options.

URL form::

    redis://[[user]:password@]host[:port][/db][?option=value&...]
    rediss://...            (the same, over TLS)

One server: a Redis or Valkey primary (or a proxy in front of one). Every
option can be given as a query parameter or in the ``options`` mapping handed
to :func:`toolbus_redis.connect` (the mapping wins, so a password can stay out
of the URL); they are read by the core's option reader like every broker's, so
an unknown name is refused and every problem is reported at once.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    host_port,
    parse_broker_options,
    split_url,
)
from toolbus._internal.urls import redact_url
from toolbus.domain.errors import Problem

DEFAULT_PORT = 6379
SCHEMES = ("redis", "rediss")
#: Redis's own limit on one argument (``proto-max-bulk-len``), by default.
DEFAULT_MAX_VALUE = 512 * 1024 * 1024


class RedisOptions(BrokerOptions):
    """Everything :func:`toolbus_redis.connect` needs; see ``docs/state-stores.md``."""

    broker: ClassVar[str] = "Redis"

    #: ``host:port`` of the server.
    server: Text = f"127.0.0.1:{DEFAULT_PORT}"
    #: The database number (also the URL's path: ``redis://host/2``).
    db: Annotated[WholeNumber, at_least(0)] = 0
    #: Every key the store writes starts with ``<prefix>:``.
    prefix: Text = "toolbus"
    # -- authentication ---------------------------------------------------------
    #: An ACL user (Redis 6 and later); without one, ``password`` is the ``default`` user's.
    username: SecretText = None
    password: SecretText = None
    # -- TLS ----------------------------------------------------------------------
    tls: Flag = False
    tls_ca: Text | None = None
    tls_cert: Text | None = None
    tls_key: Text | None = None
    # -- connection ---------------------------------------------------------------
    #: Seconds to connect, and to wait for each answer.
    timeout: PositiveSeconds = 5.0
    #: Connections to the server at most, watches included (each open watch holds one).
    max_connections: PositiveInt = 64
    #: Connection name shown by ``CLIENT LIST``.
    name: Text | None = None
    #: The largest value accepted, in bytes.
    max_value_size: PositiveInt = DEFAULT_MAX_VALUE

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.asyncio.Redis``."""
        host, _, port = self.server.rpartition(":")
        kwargs: dict[str, Any] = {
            "host": host.strip("[]"),
            "port": int(port),
            "db": self.db,
            "username": self.username,
            "password": self.password,
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "max_connections": self.max_connections,
            "client_name": self.name,
        }
        if self.tls or self.tls_ca or self.tls_cert:
            kwargs.update(
                ssl=True,
                ssl_ca_certs=self.tls_ca,
                ssl_certfile=self.tls_cert,
                ssl_keyfile=self.tls_key,
            )
        return kwargs


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> RedisOptions:
    """Read ``url`` and ``options`` into :class:`RedisOptions` (``options`` wins)."""
    parts = split_url(url, "Redis", DEFAULT_PORT)
    where = f"state store URL {redact_url(url)!r}"
    problems: list[Problem] = []
    if parts.scheme not in SCHEMES:
        problems.append(
            Problem(where, "", "is not a Redis URL; use redis://host:port or rediss://")
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    values: dict[str, Any] = {}
    if "," in hosts:
        problems.append(
            Problem(where, "", "names several servers; give the primary's host:port only")
        )
    elif hosts:
        try:
            values["server"] = host_port(hosts, DEFAULT_PORT)
        except ValueError:
            problems.append(Problem(where, "", f"Redis server {hosts!r} is not host[:port]"))
    else:
        problems.append(Problem(where, "", "names no server; use redis://host:port"))
    if userinfo:  # read as redis-py reads it: user, then ':' and the password
        user, _, password = userinfo.partition(":")
        if user:
            values["username"] = unquote(user)
        if password:
            values["password"] = unquote(password)
    database = parts.path.strip("/")
    if database:
        values["db"] = database
    if parts.scheme == "rediss":
        values["tls"] = True
    return parse_broker_options(
        RedisOptions, parts.query, options, where=where, url_values=values, problems=problems
    )
