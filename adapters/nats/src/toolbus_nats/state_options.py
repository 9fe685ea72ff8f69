"""The NATS state store's URL, options and key names.

URL form: the broker's (``nats://[user:password@|token@]host[:port][,...]``,
``nats+tls://``) with the connection options of ``docs/adapters/nats.md``, and
these of its own:

* ``bucket``: the JetStream key-value bucket (default ``toolbus``), made on first
  use; every namespace of the store shares it.
* ``replicas`` (1 to 5) and ``storage`` (``file`` or ``memory``): how the bucket
  is kept when it is made; on a cluster, ``replicas=3`` survives the loss of a node.
* ``timeout``: seconds each request waits for JetStream's answer.

The options that only a broker uses (``ack_wait``, ``pull_batch`` ...) are
refused here, so that one meant for the broker is not silently ignored.

Keys: a namespace and key become the bucket key ``<namespace>.<key>``, where
the key keeps ``A-Z a-z 0-9 - _ /`` and writes every other byte of its UTF-8 as
``=XX`` (upper-case hex): ``a.b`` is ``a=2Eb``, and ``=`` itself ``=3D``, so the
mapping is one-to-one. An escaped key longer than :data:`MAX_KEY_LENGTH` keeps
its first part and ends in ``=_`` and the SHA-256 of the key, which no escaped
key contains.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar
from urllib.parse import urlunsplit

from toolbus._internal.broker_options import (
    PositiveInt,
    PositiveSeconds,
    Text,
    at_most,
    parse_broker_options,
    split_url,
)
from toolbus._internal.state_keys import check_namespace, key_bytes
from toolbus._internal.urls import redact_url
from toolbus.domain.errors import BrokerOptionError, Problem
from toolbus_nats.options import DEFAULT_PORT, NatsOptions, parse_options

DEFAULT_BUCKET = "toolbus"
#: Longest escaped key kept as it is; NATS has no hard limit on a subject, but
#: every request carries it, and servers cap a protocol line at 4 KB by default.
MAX_KEY_LENGTH = 480
_KEPT_LENGTH = MAX_KEY_LENGTH - 66  # room for "=_" and 64 hex digits
_SAFE_KEY = re.compile(r"[A-Za-z0-9_/-]+")
_SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_/-")
_BUCKET = re.compile(r"[A-Za-z0-9_-]{1,200}")
#: What the broker's reading of a URL finds in it besides options.
_FROM_URL = {"servers", "user", "password", "token", "tls"}

#: NatsOptions only a broker uses: set for a state store, they are a mistake.
BROKER_ONLY = (
    "ack_wait",
    "confirm_acks",
    "max_deliveries",
    "pull_batch",
    "max_age",
    "dead_letter_max_age",
    "publish_timeout",
    "fanout_inactive_threshold",
)


class NatsStateOptions(NatsOptions):
    """The connection options of :class:`~toolbus_nats.options.NatsOptions`, and the bucket's."""

    broker: ClassVar[str] = "NATS state store"

    #: The key-value bucket (a JetStream stream ``KV_<bucket>``).
    bucket: Text = DEFAULT_BUCKET
    #: Copies of the bucket a cluster keeps (1 to 5), when the bucket is made.
    replicas: Annotated[PositiveInt, at_most(5, " (a JetStream limit)")] = 1
    #: Seconds each request waits for JetStream's answer.
    timeout: PositiveSeconds = 5.0

    def conflicts(self) -> Iterator[tuple[str, str]]:
        yield from super().conflicts()
        for name in BROKER_ONLY:
            if name in self.model_fields_set:
                yield name, "is for broker URLs; a state store does not use it (leave it out)"
        if not _BUCKET.fullmatch(self.bucket):
            yield "bucket", "may hold only letters, digits, '-' and '_' (at most 200)"

    def broker_options(self) -> dict[str, Any]:
        """The options the NATS connection itself is made with."""
        own = {"bucket", "timeout", *BROKER_ONLY}
        return self.model_dump(exclude=own)


def parse_state_options(url: str, options: Mapping[str, Any] | None = None) -> NatsStateOptions:
    """Read a state store ``url`` and ``options`` into :class:`NatsStateOptions`.

    The servers and credentials are read from the URL as the broker reads them;
    its problems are reported as the state store URL's, with the options' own.
    """
    parts = split_url(url, "NATS", DEFAULT_PORT)
    where = f"state store URL {redact_url(url)!r}"
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    try:
        connection = parse_options(urlunsplit((parts.scheme, parts.netloc, "", "", "")))
        values = connection.model_dump(include=_FROM_URL, exclude_unset=True)
    except BrokerOptionError as exc:
        problems = [Problem(where, problem.field, problem.message) for problem in exc.problems]
    return parse_broker_options(
        NatsStateOptions, parts.query, options, where=where, url_values=values, problems=problems
    )


def bucket_key(namespace: str, key: str) -> str:
    """The bucket key holding ``key`` of ``namespace`` (see the module's docstring)."""
    check_namespace(namespace)
    if _SAFE_KEY.fullmatch(key) and len(key) <= MAX_KEY_LENGTH:
        return f"{namespace}.{key}"
    raw = key_bytes(key)
    escaped = "".join(chr(byte) if byte in _SAFE_BYTES else f"={byte:02X}" for byte in raw)
    if len(escaped) > MAX_KEY_LENGTH:
        escaped = f"{escaped[:_KEPT_LENGTH]}=_{hashlib.sha256(raw).hexdigest()}"
    return f"{namespace}.{escaped}"
