"""Queue names: Pulsar-style ``{persistent|non-persistent}://tenant/namespace/name``,
TrustGraph's ``class:topicspace:topic``, or plain.

Each adapter maps a name deterministically onto its broker: Pulsar uses the
topic as is, NATS and Kafka use :attr:`QueueName.dotted` (``tenant.namespace.name``).
``persistent`` promises at-least-once delivery with acks; ``non-persistent``
at-most-once. A plain name follows Pulsar's own rule and is persistent, in
tenant ``public`` and namespace ``default``; its dotted form is the name itself.

TrustGraph (2.2 and later) names queues ``class:topicspace:topic``, and its
pub/sub backends map them the same way: ``request:tg:joke`` is
the Pulsar topic ``non-persistent://tg/request/joke`` and the Kafka topic
``tg.request.joke`` (class ``flow`` is persistent; ``request``, ``response`` and
``notify`` are not). Both spellings therefore name the same queue on every
broker. The topic part may hold further ``:``-separated words
(``request:tg:tool:ws1``); on Kafka and NATS they become dots.
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
#: TrustGraph's queue classes and whether each is persistent.
TRUSTGRAPH_CLASSES = {"flow": True, "request": False, "response": False, "notify": False}
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
        # A TrustGraph topic's further words (``tool:ws1``) become dots, as TrustGraph does.
        return f"{self.tenant}.{self.namespace}.{self.name.replace(':', '.')}"

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
    if not sep and ":" in raw:
        queue = _parse_trustgraph_id(raw)
    elif not sep:
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


def _parse_trustgraph_id(raw: str) -> QueueName:
    """``class:topicspace:topic``, as TrustGraph's pub/sub backends name queues."""
    parts = raw.split(":")
    if len(parts) < 3 or parts[0] not in TRUSTGRAPH_CLASSES:
        raise QueueNameError(
            f"queue name {raw!r} looks like TrustGraph's 'class:topicspace:topic' but is not: "
            f"the class must be one of {', '.join(TRUSTGRAPH_CLASSES)} and a topicspace and "
            "a topic must follow (e.g. 'request:tg:joke')"
        )
    for index, part in enumerate(parts[1:]):
        label = "topicspace" if index == 0 else "topic"
        if not _SEGMENT.fullmatch(part):
            raise QueueNameError(
                f"queue name {raw!r}: {label} {part!r} must be non-empty and use only "
                "letters, digits, '-' and '_'"
            )
    queue_class, topicspace = parts[0], parts[1]
    name = ":".join(parts[2:])
    return QueueName(
        raw, TRUSTGRAPH_CLASSES[queue_class], topicspace, queue_class, name, plain=False
    )


#: What a queue's dead letters are named after: the queue's name plus this.
DEAD_LETTERS_SUFFIX = "-dead-letters"


def dead_letter_queue(raw: str) -> str:
    """Where requests from queue ``raw`` go that a service moved aside instead of serving.

    The same tenant and namespace, the name with :data:`DEAD_LETTERS_SUFFIX`,
    and always persistent (dead letters wait for an operator):
    ``non-persistent://tg/request/joke`` -> ``persistent://tg/request/joke-dead-letters``,
    ``flow:tg:joke`` -> ``flow:tg:joke-dead-letters``, ``joke`` -> ``joke-dead-letters``.
    Raises :class:`QueueNameError` when the name would grow too long for a broker.
    """
    queue = parse_queue(raw)
    if queue.plain:
        name = queue.name + DEAD_LETTERS_SUFFIX
    elif "://" in raw:
        name = f"persistent://{queue.tenant}/{queue.namespace}/{queue.name}{DEAD_LETTERS_SUFFIX}"
    else:  # TrustGraph's class:topicspace:topic; its "flow" class is the persistent one
        name = f"flow:{queue.tenant}:{queue.name}{DEAD_LETTERS_SUFFIX}"
    try:
        parse_queue(name)
    except QueueNameError as exc:
        raise QueueNameError(
            f"queue name {raw!r} is too long to name its dead letters ({exc}); shorten it"
        ) from None
    return name
