"""Broker URL and options: parsing, validation, and what they become for pulsar-client.

The URL may list several brokers (``pulsar://pulsar-1:6650,pulsar-2:6650``);
pulsar-client spreads its lookups over them and moves on from one that does not
answer. Options come from the URL's query string (``pulsar://host:6650?operation_timeout=5``)
and from the ``options`` mapping (``[broker-options]`` in ``toolbus.toml``); the
mapping wins. :class:`PulsarOptions` describes them, read by the core's
:func:`~toolbus._internal.broker_options.parse_broker_options` like every broker's: every
problem is reported at once, as a :class:`BrokerOptionError` naming the option
and the fix. Secrets (tokens, passwords) never appear in messages:
:attr:`PulsarOptions.safe_url` is the URL without query or user info.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

import pulsar
import pydantic

from toolbus._internal.broker_options import (
    BrokerOptions,
    Flag,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SecretText,
    Text,
    bad_option,
    broker_url_where,
    one_of,
    parse_broker_options,
    public_url,
    split_url,
    url_servers,
)
from toolbus.domain.errors import Problem

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


class PulsarOptions(BrokerOptions):
    """Everything the adapter needs to know, validated. Times are in seconds."""

    broker: ClassVar[str] = "Pulsar"

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
    tls_cert_file: Text | None = None
    tls_key_file: Text | None = None
    tls_trust_certs_file: Text | None = None
    tls_allow_insecure: Flag = False
    tls_validate_hostname: Flag = False

    # The URL is not an option: it is read from the URL, never from the mapping.
    _service_url: str = pydantic.PrivateAttr(f"pulsar://127.0.0.1:{DEFAULT_PORT}")

    @property
    def service_url(self) -> str:
        """The service URL handed to pulsar-client (query string removed)."""
        return self._service_url

    def conflicts(self) -> Iterator[tuple[str, str]]:
        methods = [
            label
            for label, given in (
                ("token", self.token),
                ("token_file", self.token_file),
                ("oauth2", self.oauth2),
                ("basic_username", self.basic_username),
                ("tls_cert_file/tls_key_file", self.tls_cert_file),
            )
            if given is not None
        ]
        if len(methods) > 1:
            yield "", f"sets several authentication methods ({', '.join(methods)}); pick one"
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            yield "tls_cert_file", "and 'tls_key_file' must be given together (mutual TLS)"
        if self.basic_password is not None and self.basic_username is None:
            yield "basic_password", "needs 'basic_username'"

    @property
    def safe_url(self) -> str:
        """The service URL as it may be shown to people: no query, no user info."""
        return public_url(urlsplit(self.service_url))

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
            self.tls_cert_file,
            self.tls_key_file,
            self.tls_trust_certs_file,
            self.tls_allow_insecure,
            self.tls_validate_hostname,
        )

    def client_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``pulsar.Client`` (minus the logger)."""
        arguments: dict[str, Any] = {
            # pulsar-client takes whole seconds here; round up so that a small value
            # never becomes 0 (which would mean "no timeout").
            "operation_timeout_seconds": max(1, math.ceil(self.operation_timeout)),
            "connection_timeout_ms": max(1, round(self.connect_timeout * 1000)),
            "io_threads": self.io_threads,
            "tls_allow_insecure_connection": self.tls_allow_insecure,
            "tls_validate_hostname": self.tls_validate_hostname,
        }
        if self.tls_trust_certs_file:
            arguments["tls_trust_certs_file_path"] = self.tls_trust_certs_file
        authentication = self.authentication()
        if authentication is not None:
            arguments["authentication"] = authentication
        return arguments

    def authentication(self) -> pulsar.Authentication | None:
        """The one authentication method configured, if any."""
        if self.token is not None:
            return pulsar.AuthenticationToken(self.token)
        if self.token_file is not None:
            path = Path(self.token_file)
            # Read on every (re)connection, so that a rotated token is picked up.
            return pulsar.AuthenticationToken(lambda: path.read_text().strip())
        if self.oauth2 is not None:
            return pulsar.AuthenticationOauth2(self.oauth2)
        if self.basic_username is not None:
            return pulsar.AuthenticationBasic(self.basic_username, self.basic_password or "")
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            return pulsar.AuthenticationTLS(self.tls_cert_file, self.tls_key_file)
        return None


OPTION_NAMES: tuple[str, ...] = tuple(sorted(PulsarOptions.model_fields))


def parse_options(url: str, options: Mapping[str, Any] | None = None) -> PulsarOptions:
    """Validate ``url`` and ``options`` (query string first, then the mapping on top)."""
    parts = split_url(url, "Pulsar", DEFAULT_PORT)
    where = broker_url_where(parts)
    problems: list[Problem] = []
    if parts.scheme not in SCHEMES:
        problems.append(
            Problem(
                where, "", "is not a Pulsar URL; use pulsar://host:6650 or pulsar+ssl://host:6651"
            )
        )
    if "@" in parts.netloc:
        problems.append(
            Problem(
                where,
                "",
                "carries credentials; pass them as options instead "
                "(token, token_file, basic_username/basic_password, oauth2)",
            )
        )
    elif not parts.netloc:
        problems.append(Problem(where, "", "names no host; use pulsar://host:6650"))
    else:
        # pulsar-client reads the host list itself: it is only checked here.
        problems += url_servers(
            parts.netloc,
            DEFAULT_PORT,
            where,
            lambda server: (
                f"lists {server!r}, which is not host[:port]; list brokers as "
                "pulsar://host:6650,host:6650"
            ),
        )[1]
    parsed = parse_broker_options(
        PulsarOptions, parts.query, options, where=where, problems=problems
    )
    # Set once, before anyone else sees the options (the URL carries no user info).
    parsed._service_url = public_url(parts)
    return parsed
