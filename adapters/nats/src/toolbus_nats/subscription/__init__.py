"""Reading queues, split by persistence: core NATS and JetStream deliver too differently to share.

* :mod:`~toolbus_nats.subscription.core`: ``non-persistent://`` queues on core NATS
  subjects: at most once, a queue group per competing group, pushed to a
  listener or buffered for readers.
* :mod:`~toolbus_nats.subscription.jetstream`: ``persistent://`` queues on
  JetStream pull consumers: at least once, acks confirmed, dead letters.

Both hand deliveries to a subscription's readers through the core's
``toolbus._internal.delivery_buffer``, as every adapter does.
"""

from toolbus_nats.subscription.core import CoreDelivery, CoreListener, CoreSubscription
from toolbus_nats.subscription.jetstream import JetStreamDelivery, PullSubscription

__all__ = [
    "CoreDelivery",
    "CoreListener",
    "CoreSubscription",
    "JetStreamDelivery",
    "PullSubscription",
]
