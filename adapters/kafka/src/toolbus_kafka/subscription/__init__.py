"""Reading: one aiokafka consumer per subscription, read by whoever iterates it.

Modules: ``reading`` (what both kinds share: readers taking turns to fetch, the
inbox, deliveries), ``fanout`` and ``groups`` (the two kinds), ``tracking``
(which offsets a group may commit when acks arrive out of order).

*Fan-out* (``group=None``): a consumer outside any group, assigned every
partition of the topic and positioned at its end before ``subscribe`` returns.
It sees every message published afterwards and keeps no offsets in Kafka.

*Group* (competing consumers): a member of the consumer group named after the
group; the group's members share the topic's partitions. Offsets are committed
only for what is done: on ``persistent://`` queues a record is done when it is
acked (the commit point is the first record not yet acked, see
:mod:`~toolbus_kafka.subscription.tracking`); on ``non-persistent://`` queues when it is handed
to the subscriber (at-most-once). When a rebalance takes partitions away, the
member stops handing out their records, waits for its calls in flight on them
to be acked (bounded by the rebalance timeout) and commits before it lets go,
so the next owner neither repeats nor skips anything.

A nacked delivery goes back to the front of this subscription's inbox and is
handed out again, marked redelivered. Closing commits what is done and leaves
the group; whatever is not done is read again by the member that takes over.

*A broker that lost its data* (a restart of a broker that keeps it in memory,
such as Tansu) comes back without the topic, the group and its offsets. A
member the group forgot gives up its partitions without committing (offsets
read before would point into a different log), makes sure the topic exists
again, and rejoins; a member that has been in the group before starts a
partition the group has no offset for at its beginning, so the requests sent
since the restart are all handled. A fan-out reader whose partition is now
shorter than where it was reading starts that partition again from its
beginning.
"""

from toolbus_kafka.subscription.fanout import FanoutSubscription
from toolbus_kafka.subscription.groups import GroupSubscription
from toolbus_kafka.subscription.reading import KafkaDelivery, KafkaSubscription

__all__ = ["FanoutSubscription", "GroupSubscription", "KafkaDelivery", "KafkaSubscription"]
