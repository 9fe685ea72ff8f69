"""Queue names to RabbitMQ exchanges and queues (pinned against TrustGraph in tests/trustgraph)."""

from __future__ import annotations

import pytest

from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import QueueNameError
from toolbus_rabbitmq.naming import MAX_NAME_BYTES, exchange_for, fanout_queue, group_queue


@pytest.mark.parametrize(
    ("queue", "exchange"),
    [
        ("non-persistent://tg/request/joke", "tg.request.joke"),
        ("persistent://tg/request/joke", "tg.request.joke"),
        ("request:tg:joke", "tg.request.joke"),
        ("response:tg:joke", "tg.response.joke"),
        ("flow:tg:jobs", "tg.flow.jobs"),
        # TrustGraph keeps a topic's further words as they are on RabbitMQ.
        ("request:tg:tool:ws1", "tg.request.tool:ws1"),
        ("orders.new", "orders.new"),
    ],
)
def test_a_queue_is_the_fanout_exchange_trustgraph_names(queue: str, exchange: str) -> None:
    assert exchange_for(parse_queue(queue)) == exchange


def test_a_group_shares_one_queue_named_like_a_trustgraph_subscription() -> None:
    assert group_queue("tg.request.joke", "joke-service") == "tg.request.joke.joke-service"


def test_each_fanout_subscriber_gets_a_queue_of_its_own() -> None:
    first, second = fanout_queue("tg.response.joke"), fanout_queue("tg.response.joke")

    assert first != second and first.startswith("tg.response.joke.fanout-")


def test_long_names_are_cut_to_rabbitmq_s_limit_and_stay_distinct() -> None:
    exchange = "t." + "x" * 240
    names = {group_queue(exchange, f"group-{n}") for n in range(3)} | {fanout_queue(exchange)}

    assert len(names) == 4
    assert all(len(name.encode()) <= MAX_NAME_BYTES for name in names)


def test_a_name_rabbitmq_keeps_for_itself_is_refused() -> None:
    with pytest.raises(QueueNameError, match=r"'amq\.orders'.*rename the queue"):
        exchange_for(parse_queue("amq.orders"))
