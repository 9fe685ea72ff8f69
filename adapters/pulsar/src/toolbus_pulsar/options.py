"""Broker URL and options: parsing, validation, and the client settings they make.

The URL may list several brokers (``pulsar://pulsar-1:6650,pulsar-2:6650``);
pulsar-client spreads its lookups over them and moves on from one that does not
answer. Options come from the URL's query string (``pulsar://host:6650?operation_timeout=5``)
and from the ``options`` mapping (``[broker-options]`` in ``toolbus.toml``); the
mapping wins. :class:`PulsarOptions` describes them, and :func:`parse_options`
reads the URL like every broker's
(:func:`~toolbus._internal.broker_options.parse_broker_url`): every problem is
reported at once, as a :class:`BrokerOptionError` naming the option and the
fix. Secrets (tokens, passwords) never appear in messages:
:attr:`PulsarOptions.safe_url` is the URL without query or user info. What the
TLS and authentication options become is :mod:`toolbus_pulsar.security`'s business.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import pydantic

from toolbus._internal.broker_options import (
    Flag,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SecretText,
    Text,
    bad_option,
    host_ports,
    one_of,
    parse_broker_url,
)
from toolbus._internal.broker_tls import TlsOptions
from toolbus._internal.urls import redact_url

SCHEMES = ("pulsar", "pulsar+ssl")
DEFAULT_PORT = 6650

#: Apache Pulsar's default ``maxMessageSize`` (5 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

LOG_LEVELS = ("debug", "info", "warn", "error")


def _oauth2(value: object) -> str:
    # pulsar-client wants the parameters as a JSON string; accept a table too.
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    if isinstance(value, str) and value:
        try:
            if isinstance(json.loads(value), dict):
                return value
        except ValueError:
            pass
    raise bad_option(
        'must be a JSON object such as {"issuer_url": ..., "private_key": ..., "audience": ...}'
    )


class PulsarOptions(TlsOptions):
    """Everything the adapter needs to know, validated. Times are in seconds."""

    broker: ClassVar[str] = "Pulsar"
    schemes: ClassVar[tuple[str, ...]] = SCHEMES
    tls_schemes: ClassVar[tuple[str, ...]] = ("pulsar+ssl",)
    default_port: ClassVar[int] = DEFAULT_PORT
    url_form: ClassVar[str] = "pulsar://host:6650[,host:6650] or pulsar+ssl://host:6651"

    #: How long ``connect`` waits for the broker before failing (also the TCP connect timeout).
    connect_timeout: PositiveSeconds = 5.0
    #: Bound on broker operations: creating producers and subscriptions, and each send.
    operation_timeout: PositiveSeconds = 10.0
    #: Delay before a nacked message is delivered again (Pulsar's default is 60 s).
    nack_redelivery_delay: Seconds = 1.0
    #: Messages each consumer prefetches. Larger is faster; smaller spreads work more
    #: evenly across the members of a persistent group.
    receiver_queue_size: PositiveInt = 1000
    #: Unreceipted sends per topic; beyond that ``publish`` waits (backpressure).
    max_pending_messages: PositiveInt = 1000
    #: Largest body ``publish`` accepts. Match the broker's ``maxMessageSize``.
    max_message_size: PositiveInt = DEFAULT_MAX_MESSAGE_SIZE
    #: Batch sends for up to this long (seconds); 0 sends every message at once.
    batching_delay: Seconds = 0.0
    #: Wait for the broker's receipt of sends to non-persistent topics too
    #: (sends to persistent topics always wait).
    confirm_non_persistent: Flag = False
    #: pulsar-client I/O threads.
    io_threads: PositiveInt = 1
    #: pulsar-client's own log lines at this level and above go to the
    #: ``toolbus_pulsar.client`` logger: debug, info, warn or error.
    client_log_level: Annotated[str, one_of(*LOG_LEVELS)] = "warn"
    token: SecretText = None
    token_file: Text | None = None
    oauth2: Annotated[
        Annotated[str, pydantic.PlainValidator(_oauth2)] | None, pydantic.Field(repr=False)
    ] = None
    basic_username: Text | None = None
    basic_password: SecretText = None
    # -- TLS (tls, tls_ca, tls_cert, tls_key: TlsOptions) --------------------------
    #: As pulsar-client has it, the certificate's host name is not checked by default.
    tls_check_hostname: Flag = False
    #: Accept a broker certificate that cannot be trusted (testing only).
    tls_allow_insecure: Flag = False

    # The URL is not an option: it is read from the URL, never from the mapping.
    _service_url: str = pydantic.PrivateAttr(f"pulsar://127.0.0.1:{DEFAULT_PORT}")

    @property
    def service_url(self) -> str:
        """The service URL handed to pulsar-client (query string removed)."""
        return self._service_url

    def conflicts(self) -> Iterator[tuple[str, str]]:
        yield from super().conflicts()
        methods = [
            label
            for label, given in (
                ("token", self.token),
                ("token_file", self.token_file),
                ("oauth2", self.oauth2),
                ("basic_username", self.basic_username),
                ("tls_cert/tls_key", self.tls_cert),
            )
            if given is not None
        ]
        if len(methods) > 1:
            yield "", f"sets several authentication methods ({', '.join(methods)}); pick one"
        if self.tls_cert is not None and self.tls_key is None:
            yield "tls_cert", "needs 'tls_key' (Pulsar's TLS authentication takes both)"
        if self.basic_password is not None and self.basic_username is None:
            yield "basic_password", "needs 'basic_username'"

    @property
    def servers(self) -> tuple[str, ...]:
        """The URL's brokers as ``host:port``."""
        hosts = urlsplit(self.service_url).netloc.rpartition("@")[2]
        return host_ports(hosts.split(","), DEFAULT_PORT)[0]

    @property
    def safe_url(self) -> str:
        """The service URL as it may be shown to people (it has no query or user info)."""
        return redact_url(self.service_url)

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
            self.tls_ca,
            self.tls_cert,
            self.tls_key,
            self.tls_check_hostname,
            self.tls_allow_insecure,
        )

    def connection_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``pulsar.Client`` but TLS, authentication and the logger
        (:func:`toolbus_pulsar.security.security_arguments`)."""
        return {
            # pulsar-client takes whole seconds here; round up so that a small value
            # never becomes 0 (which would mean "no timeout").
            "operation_timeout_seconds": max(1, math.ceil(self.operation_timeout)),
            "connection_timeout_ms": max(1, round(self.connect_timeout * 1000)),
            "io_threads": self.io_threads,
        }

    @classmethod
    def from_userinfo(cls, user: str, password: str | None) -> dict[str, Any] | str:
        return (
            "carries credentials; pass them as options instead "
            "(token, token_file, basic_username/basic_password, oauth2)"
        )


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> PulsarOptions:
    """Validate ``url`` and ``options`` (query string first, then the mapping on top)."""
    parsed = parse_broker_url(PulsarOptions, url, options)
    # pulsar-client takes TLS from the service URL's scheme: a CA or a client
    # certificate asks for it as ``tls`` does. Set once, before anyone else sees the
    # options; the URL carries no user info (parse_broker_url refuses it).
    parts = urlsplit(url)
    if parsed.uses_tls:
        parts = parts._replace(scheme="pulsar+ssl")
    parsed._service_url = urlunsplit(parts._replace(query="", fragment=""))
    return parsed
