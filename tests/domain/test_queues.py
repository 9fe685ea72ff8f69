"""Queue names: Pulsar-style or plain, and how adapters map them (docs/wire-protocol.md)."""

from __future__ import annotations

import pytest

from toolbus.domain.calls.queues import MAX_DOTTED_LENGTH, QueueName, parse_queue
from toolbus.domain.errors import QueueNameError


def test_a_persistent_queue() -> None:
    queue = parse_queue("persistent://tg/request/joke")

    assert queue == QueueName(
        raw="persistent://tg/request/joke",
        persistent=True,
        tenant="tg",
        namespace="request",
        name="joke",
        plain=False,
    )
    assert queue.dotted == "tg.request.joke"
    assert queue.topic == "persistent://tg/request/joke"
    assert str(queue) == "persistent://tg/request/joke"


def test_a_non_persistent_queue() -> None:
    queue = parse_queue("non-persistent://tg/response/joke")

    assert queue.persistent is False
    assert (queue.tenant, queue.namespace, queue.name) == ("tg", "response", "joke")
    assert queue.dotted == "tg.response.joke"
    assert queue.topic == "non-persistent://tg/response/joke"


@pytest.mark.parametrize("raw", ["joke-requests", "tg.request.joke", "a_b-c.D9"])
def test_a_plain_queue_is_persistent_in_the_default_namespace(raw: str) -> None:
    queue = parse_queue(raw)

    assert queue.plain is True
    assert queue.persistent is True
    assert (queue.tenant, queue.namespace, queue.name) == ("public", "default", raw)
    assert queue.dotted == raw
    assert queue.topic == f"persistent://public/default/{raw}"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("http://tg/request/joke", "scheme 'http'"),
        ("persistent://tg/joke", "tenant/namespace/name"),
        ("persistent://tg/request/joke/extra", "tenant/namespace/name"),
        ("persistent://tg//joke", "namespace ''"),
        ("persistent://tg/request/jo.ke", "dots would make"),
        ("non-persistent://t g/request/joke", "tenant 't g'"),
        ("with space", "letters, digits"),
        ("trailing.", "letters, digits"),
        (".leading", "letters, digits"),
        ("double..dot", "letters, digits"),
        ("slash/name", "letters, digits"),
        ("ü", "letters, digits"),
    ],
)
def test_names_that_cannot_map_are_rejected_with_the_reason(raw: str, reason: str) -> None:
    with pytest.raises(QueueNameError, match=reason):
        parse_queue(raw)


def test_names_too_long_for_kafka_are_rejected() -> None:
    fits = "persistent://t/n/" + "x" * (MAX_DOTTED_LENGTH - 4)
    too_long = fits + "x"

    assert len(parse_queue(fits).dotted) == MAX_DOTTED_LENGTH
    with pytest.raises(QueueNameError, match=f"at most {MAX_DOTTED_LENGTH}"):
        parse_queue(too_long)


def test_a_queue_name_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_queue("bad://x/y/z")


def test_a_plain_dotted_name_addresses_the_same_subject_as_its_qualified_form() -> None:
    # Deliberate: a raw NATS or Kafka client that knows nothing of Pulsar names
    # reaches the joke service at "tg.request.joke".
    plain, qualified = (
        parse_queue("tg.request.joke"),
        parse_queue("non-persistent://tg/request/joke"),
    )
    assert plain.dotted == qualified.dotted == "tg.request.joke"
    assert plain.persistent and not qualified.persistent


@pytest.mark.parametrize(
    ("raw", "pulsar", "kafka", "persistent"),
    [
        ("request:tg:joke", "non-persistent://tg/request/joke", "tg.request.joke", False),
        ("response:tg:joke", "non-persistent://tg/response/joke", "tg.response.joke", False),
        ("notify:tg:config", "non-persistent://tg/notify/config", "tg.notify.config", False),
        ("flow:tg:jobs", "persistent://tg/flow/jobs", "tg.flow.jobs", True),
        (
            "request:tg:tool:ws1:default",
            "non-persistent://tg/request/tool:ws1:default",
            "tg.request.tool.ws1.default",
            False,
        ),
    ],
)
def test_trustgraph_queue_ids_map_as_trustgraph_s_own_backends_map_them(
    raw: str, pulsar: str, kafka: str, persistent: bool
) -> None:
    queue = parse_queue(raw)

    assert (queue.topic, queue.dotted, queue.persistent) == (pulsar, kafka, persistent)
    assert str(queue) == raw


def test_both_spellings_of_a_queue_reach_the_same_topic_on_every_broker() -> None:
    ours, theirs = parse_queue("non-persistent://tg/request/joke"), parse_queue("request:tg:joke")

    assert (ours.topic, ours.dotted) == (theirs.topic, theirs.dotted)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("queue:tg:joke", "class must be one of flow, request, response, notify"),
        ("request:tg", "a topicspace and a topic must follow"),
        ("request::joke", "topicspace ''"),
        ("request:tg:jo.ke", "topic 'jo.ke'"),
        ("request:tg:joke:", "topic ''"),
    ],
)
def test_malformed_trustgraph_queue_ids_are_rejected_with_the_reason(raw: str, reason: str) -> None:
    with pytest.raises(QueueNameError, match=reason):
        parse_queue(raw)
