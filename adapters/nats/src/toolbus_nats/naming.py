"""How toolbus queue names map onto NATS subjects, JetStream streams and consumers.

* Subject: :attr:`QueueName.dotted`, so ``non-persistent://tg/request/joke`` is
  ``tg.request.joke`` (what TrustGraph-style clients use on NATS).
* Stream (persistent queues only): ``TOOLBUS_`` followed by the subject with
  ``.`` written as ``_``, ``_`` as ``-_`` and ``-`` as ``--``. The common case
  stays readable (``tg.request.joke`` → ``TOOLBUS_tg_request_joke``), and the
  escaping keeps the mapping one-to-one: ``a_b.c`` and ``a.b_c`` would both
  become ``a_b_c`` with a plain replacement.
* Durable consumer: the group name itself when NATS accepts it as a consumer
  name, else ``toolbus-`` and a hash of it.
* Dead letters: subject ``<subject>.dlq``, kept in their own stream (named by
  the same rule, so ``TOOLBUS_tg_request_joke_dlq``).
"""

from __future__ import annotations

import hashlib
import re

from toolbus.domain.calls.queues import QueueName

STREAM_PREFIX = "TOOLBUS_"
DEAD_LETTER_SUFFIX = ".dlq"
# JetStream stores each stream in a directory of that name; stay well under the
# usual 255-byte file-name limit.
MAX_NAME_LENGTH = 200
_ESCAPES = str.maketrans({".": "_", "_": "-_", "-": "--"})
_CONSUMER_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")


def subject_for(queue: QueueName) -> str:
    """The NATS subject a queue is published on."""
    return queue.dotted


def dead_letter_subject(subject: str) -> str:
    """Where messages never acknowledged end up (:mod:`toolbus_nats.subscription.jetstream`)."""
    return subject + DEAD_LETTER_SUFFIX


def stream_name(subject: str) -> str:
    """The JetStream stream that stores ``subject`` (one stream per persistent queue)."""
    escaped = STREAM_PREFIX + subject.translate(_ESCAPES)
    if len(escaped) <= MAX_NAME_LENGTH:
        return escaped
    # Longer than any escaped name, so a hashed name never equals an escaped one.
    return f"{escaped[: MAX_NAME_LENGTH - 20]}_{_digest(subject)}"


def consumer_name(group: str) -> str:
    """The durable JetStream consumer shared by the members of ``group``."""
    if _CONSUMER_NAME.fullmatch(group):
        return group
    return f"toolbus-{_digest(group)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
