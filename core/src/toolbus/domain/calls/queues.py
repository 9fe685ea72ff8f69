"""Queue names: Pulsar-style ``{persistent|non-persistent}://tenant/namespace/name`` or plain.

Each adapter maps a name deterministically onto its broker: Pulsar uses the
topic as is, NATS and Kafka use :attr:`QueueName.dotted` (``tenant.namespace.name``).
``persistent`` promises at-least-once delivery with acks; ``non-persistent``
at-most-once. A plain name follows Pulsar's own rule and is persistent, in
tenant ``public`` and namespace ``default``; its dotted form is the name itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from toolbus.domain.errors import QueueNameError

# Dots separate the tokens of the dotted form, so a segment may not contain one:
# otherwise two different queues could map to the same NATS subject or Kafka topic.
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_PLAIN = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
# Kafka's limit on topic names, the strictest of the brokers we map onto.
MAX_DOTTED_LENGTH = 249


@dataclass(frozen=True, slots=True)
class QueueName:
    """A parsed queue name and the pieces adapters need."""

    raw: str
    persistent: bool
    tenant: str
    namespace: str
    name: str
    plain: bool

    @property
    def dotted(self) -> str:
        """``tenant.namespace.name`` (NATS subject, Kafka topic); a plain name as given."""
        if self.plain:
            return self.name
        return f"{self.tenant}.{self.namespace}.{self.name}"

    @property
    def topic(self) -> str:
        """The fully qualified Pulsar topic."""
        scheme = "persistent" if self.persistent else "non-persistent"
        return f"{scheme}://{self.tenant}/{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return self.raw


@lru_cache(maxsize=4096)
def parse_queue(raw: str) -> QueueName:
    """Parse a queue name, raising :class:`QueueNameError` with the fix when it cannot map."""
    if not isinstance(raw, str) or not raw:
        raise QueueNameError("queue name is empty; use e.g. 'non-persistent://tg/request/joke'")
    scheme, sep, rest = raw.partition("://")
    if not sep:
        if not _PLAIN.fullmatch(raw):
            raise QueueNameError(
                f"queue name {raw!r} has characters that cannot map onto every broker; "
                "use letters, digits, '-', '_' and '.' only"
            )
        queue = QueueName(raw, True, "public", "default", raw, plain=True)
    else:
        if scheme not in ("persistent", "non-persistent"):
            raise QueueNameError(
                f"queue name {raw!r} has scheme {scheme!r}; use 'persistent://' or "
                "'non-persistent://'"
            )
        parts = rest.split("/")
        if len(parts) != 3:
            raise QueueNameError(
                f"queue name {raw!r} must have the form {scheme}://tenant/namespace/name"
            )
        for label, part in zip(("tenant", "namespace", "name"), parts, strict=True):
            if not _SEGMENT.fullmatch(part):
                raise QueueNameError(
                    f"queue name {raw!r}: {label} {part!r} must be non-empty and use only "
                    "letters, digits, '-' and '_' (dots would make the NATS/Kafka name ambiguous)"
                )
        tenant, namespace, name = parts
        queue = QueueName(raw, scheme == "persistent", tenant, namespace, name, plain=False)
    if len(queue.dotted) > MAX_DOTTED_LENGTH:
        raise QueueNameError(
            f"queue name {raw!r} maps to {len(queue.dotted)} characters; "
            f"brokers accept at most {MAX_DOTTED_LENGTH}"
        )
    return queue
