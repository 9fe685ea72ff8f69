"""Making the JetStream streams and consumers persistent queues need, before they are used.

* One stream per queue subject, *interest* retention: a message is kept until
  every consumer that existed when it arrived has acked it, like a Pulsar
  topic and its subscriptions. Made idempotently by whoever needs it first; a
  stream an operator already made for the subject is used as it is.
* Dead letters go to a stream of their own per subject, *limits* retention.
* Consumers (a durable one per group, an ephemeral one per fan-out
  subscription) are made or updated idempotently.

Kafka's adapter does the same job for topics in its own ``provisioning``.
"""

from __future__ import annotations

import contextlib
import logging

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError

from toolbus_nats.errors import translate
from toolbus_nats.naming import dead_letter_subject, stream_name
from toolbus_nats.options import NatsOptions

log = logging.getLogger("toolbus.nats")

_STREAM_IN_USE = 10058  # JSStreamNameExistErr: same name, other configuration


class Streams:
    """Makes (once per connection) the streams and consumers persistent queues need."""

    def __init__(self, js: JetStreamContext, options: NatsOptions) -> None:
        self.js = js
        self.options = options
        self._streams: dict[str, str] = {}
        self._where = ",".join(options.servers)

    def forget(self, subject: str) -> None:
        """Look the subject's stream up again next time (it was deleted under us)."""
        self._streams.pop(subject, None)

    def known(self, subject: str) -> str | None:
        return self._streams.get(subject)

    def remember(self, subject: str, stream: str) -> None:
        """``stream`` holds ``subject`` (JetStream said so when it stored a message)."""
        self._streams[subject] = stream

    async def stream_for(self, subject: str) -> str:
        """The stream that stores ``subject``, made with interest retention if there is none."""
        name = self._streams.get(subject)
        if name is not None:
            return name
        try:
            name = await self._find_or_create(
                subject, RetentionPolicy.INTEREST, self.options.max_age
            )
        except Exception as exc:
            raise translate(
                exc, f"set up the JetStream stream for {subject!r}", self._where
            ) from exc
        self._streams[subject] = name
        return name

    async def dead_letter_stream(self, subject: str) -> str:
        """The stream keeping ``subject``'s dead letters (limits retention: kept until aged out)."""
        dlq = dead_letter_subject(subject)
        name = self._streams.get(dlq)
        if name is None:
            name = await self._find_or_create(
                dlq, RetentionPolicy.LIMITS, self.options.dead_letter_max_age
            )
            self._streams[dlq] = name
        return name

    async def _find_or_create(
        self, subject: str, retention: RetentionPolicy, max_age: float
    ) -> str:
        with contextlib.suppress(NotFoundError):
            return await self.js.find_stream_name_by_subject(subject)
        name = stream_name(subject)
        config = StreamConfig(
            name=name,
            description=f"toolbus queue on subject {subject}",
            subjects=[subject],
            retention=retention,
            storage=StorageType(self.options.storage),
            num_replicas=self.options.replicas,
            max_age=max_age or None,
        )
        try:
            await self.js.add_stream(config)
        except BadRequestError as exc:
            if exc.err_code != _STREAM_IN_USE:
                raise
            # Made by someone else with other limits: use it if it holds our subject.
            info = await self.js.stream_info(name)
            if subject not in (info.config.subjects or ()):
                raise
            log.info(
                "using existing stream %s for %s (its settings differ from ours)", name, subject
            )
        return name

    async def consumer(self, stream: str, subject: str, group: str | None, name: str) -> None:
        """Make (or update: the call is idempotent) consumer ``name`` for ``group``.

        ``group=None`` makes an ephemeral fan-out consumer, which the server
        removes ``fanout_inactive_threshold`` after its subscriber went away.
        """
        options = self.options
        if group is None:
            durable, inactive = None, options.fanout_inactive_threshold
        else:
            durable, inactive = name, None
        config = ConsumerConfig(
            name=name,
            durable_name=durable,
            description=f"toolbus {'group ' + repr(group) if group else 'fan-out'} on {subject}",
            deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=options.ack_wait,
            # One delivery more than the application sees: that one dead-letters it.
            max_deliver=options.max_deliveries + 1,
            filter_subject=subject,
            inactive_threshold=inactive,
        )
        try:
            await self.js.add_consumer(stream, config)
        except Exception as exc:
            raise translate(
                exc, f"set up the JetStream consumer {name!r} on {subject!r}", self._where
            ) from exc
