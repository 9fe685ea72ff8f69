"""Limits, budgets and prices as toolbus.toml gives them, and the arithmetic of counting them.

Pure functions on plain values: the token bucket and the sliding window decide,
for a stored state and a time, how many calls go and how long a refused one
waits; budget periods start where every replica agrees; a descriptor's cache
is checked like every other field.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from toolbus.domain.config.descriptors import CachePolicy
from toolbus.domain.config.durations import duration_text, parse_duration
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import ConfigError
from toolbus.domain.limits.periods import Period
from toolbus.domain.limits.rates import Rate, give_back, take
from toolbus.domain.limits.settings import parse_limit_settings

# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("written", "seconds"),
    [(30, 30.0), (1.5, 1.5), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0), ("1d", 86400.0)],
)
def test_a_duration_is_seconds_or_a_number_with_a_unit(written: Any, seconds: float) -> None:
    assert parse_duration(written) == seconds


@pytest.mark.parametrize("written", ["5x", "1h30m", "", "-5m", 0, -1, True, None, "5 minutes"])
def test_a_duration_that_is_none_says_what_to_write(written: Any) -> None:
    with pytest.raises(ValueError, match='"5m"'):
        parse_duration(written)


def test_a_duration_reads_back_as_it_is_written() -> None:
    assert [duration_text(s) for s in (60, 300, 3600, 86400, 90, 1.5)] == [
        "1m",
        "5m",
        "1h",
        "1d",
        "90s",
        "1.5s",
    ]


# ------------------------------------------------------------------ token bucket


def test_a_token_bucket_lets_a_burst_through_then_the_refill_rate() -> None:
    rate = Rate(3, 60.0, "token-bucket")  # 3 tokens, one back every 20 s
    state: dict[str, Any] | None = None
    granted = []
    for _ in range(4):
        taken = take(rate, state, 1000.0)
        granted.append(taken.granted)
        state = taken.state or state
    refused = take(rate, state, 1000.0)
    later = take(rate, state, 1020.0)

    assert granted == [1, 1, 1, 0]
    assert refused.granted == 0 and refused.retry_after == pytest.approx(20.0)
    assert later.granted == 1


def test_a_token_bucket_gives_several_at_once_and_takes_them_back() -> None:
    rate = Rate(100, 60.0, "token-bucket")
    taken = take(rate, None, 0.0, want=40)
    assert taken.granted == 40 and taken.state is not None

    returned = give_back(rate, taken.state, 0.0, 15, taken_at=0.0)

    assert returned is not None and returned["tokens"] == pytest.approx(75.0)
    assert take(rate, returned, 0.0, want=200).granted == 75


def test_a_state_stamped_in_the_future_refills_nothing_until_then() -> None:
    rate = Rate(2, 10.0, "token-bucket")
    ahead = {"tokens": 0.0, "at": 1005.0}  # a replica whose clock runs 5 s ahead wrote it

    assert take(rate, ahead, 1000.0).granted == 0
    assert take(rate, ahead, 1010.0).granted == 1


@pytest.mark.parametrize("state", [{"tokens": "lots"}, {"tokens": -5, "at": "x"}, {}])
def test_a_counter_that_reads_wrong_counts_as_full_never_as_more(state: dict[str, Any]) -> None:
    rate = Rate(2, 10.0, "token-bucket")
    assert take(rate, state, 0.0, want=5).granted <= 2


# ------------------------------------------------------------------ sliding window


def test_a_sliding_window_allows_the_limit_in_any_window() -> None:
    rate = Rate(4, 60.0)
    state: dict[str, Any] | None = None
    for _ in range(4):
        taken = take(rate, state, 90.0)  # 30 s into the window [60, 120)
        assert taken.granted == 1
        state = taken.state
    refused = take(rate, state, 90.0)

    # In the next window the last one's four calls weigh as the sliding window leaves
    # them: at 135 s it still covers 75% of [60, 120) (three calls), at 165 s 25% (one).
    assert refused.granted == 0
    assert take(rate, state, 135.0, want=10).granted == 1
    assert take(rate, state, 165.0, want=10).granted == 3


def test_a_sliding_window_says_when_a_refused_call_may_go() -> None:
    rate = Rate(2, 60.0)
    state = {"window": 1, "count": 2, "previous": 0}  # both calls made in [60, 120)

    refused = take(rate, state, 100.0)

    # The window ends in 20 s; then its two calls weigh 2 * (1 - e/60) <= 1 at e = 30.
    assert refused.granted == 0 and refused.retry_after == pytest.approx(50.0)
    assert take(rate, state, 100.0 + refused.retry_after).granted == 1
    assert take(rate, state, 100.0 + refused.retry_after - 1).granted == 0


def test_an_old_window_counts_nothing() -> None:
    rate = Rate(1, 10.0)
    assert take(rate, {"window": 3, "count": 1, "previous": 1}, 100.0).granted == 1


def test_calls_given_back_in_a_sliding_window_leave_room_in_the_window_they_were_taken() -> None:
    rate = Rate(10, 60.0)
    taken = take(rate, None, 30.0, want=10)
    in_the_next_window = give_back(rate, taken.state, 70.0, 6, taken_at=30.0)
    too_late = give_back(rate, taken.state, 130.0, 6, taken_at=30.0)

    assert in_the_next_window == {"window": 1, "count": 0, "previous": 4}
    assert too_late is None


# ------------------------------------------------------------------ budget periods


def test_a_days_budget_starts_again_at_midnight_utc() -> None:
    noon = datetime(2026, 3, 14, 12, tzinfo=UTC).timestamp()
    window, ends_in = Period.parse("1d").window(noon)
    assert ends_in == 12 * 3600
    assert Period.parse("1d").window(noon + ends_in)[0] == window + 1


def test_a_months_budget_starts_again_on_the_first_of_the_month() -> None:
    late = datetime(2026, 12, 31, 23, 0, tzinfo=UTC).timestamp()
    window, ends_in = Period.parse("month").window(late)
    assert ends_in == 3600
    assert Period.parse("month").window(late + ends_in)[0] == window + 1
    assert str(Period.parse("month")) == "month" and str(Period.parse(86400)) == "1d"


# ------------------------------------------------------------------ toolbus.toml

SETTINGS: dict[str, Any] = {
    "limits": [
        {"name": "searches", "calls": 60, "every": "1m", "tools": ["search"], "users": ["alice"]},
        {"name": "free-daily", "calls": 1000, "every": "1d", "groups": ["free"], "per": ["group"]},
        {"name": "everyone", "calls": 5, "every": 1, "per": [], "algorithm": "token-bucket"},
    ],
    "costs": {
        "currency": "EUR",
        "models": {"gpt-x": {"input-per-million": 2.0, "output-per-million": 8.0}},
        "tools": {"search": 0.01, "geocode": "reported", "*": 0.001},
    },
    "budgets": [{"name": "daily", "amount": 5, "every": "1d"}],
}


def test_limits_count_the_calls_they_select_in_the_counters_per_names() -> None:
    searches, free, everyone = parse_limit_settings(SETTINGS).limits

    assert searches.counters("alice", ("default",), "search") == ("user=alice",)
    assert searches.counters("bob", ("default",), "search") == ()  # not one of its users
    assert searches.counters("alice", ("default",), "lookup") == ()  # not one of its tools
    assert free.counters("bob", ("free", "paid"), "lookup") == ("group=free",)
    assert free.counters("bob", ("paid",), "lookup") == ()
    assert everyone.counters("anyone", (), "lookup") == ("everyone",)
    assert searches.rate == Rate(60, 60.0) and everyone.rate.algorithm == "token-bucket"


def test_a_limit_per_group_counts_in_each_group_of_the_call() -> None:
    (limit,) = parse_limit_settings(
        {"limits": [{"name": "g", "calls": 1, "every": "1h", "per": ["user", "group"]}]}
    ).limits
    assert limit.counters("ann", ("a", "b"), "t") == ("user=ann/group=a", "user=ann/group=b")


def test_prices_say_what_a_call_and_a_model_turn_cost() -> None:
    prices = parse_limit_settings(SETTINGS).prices
    assert prices is not None

    assert prices.tool_call("search", reported=3.0) == 0.01  # the operator's price wins
    assert prices.tool_call("geocode", reported=0.2) == 0.2
    assert prices.tool_call("geocode", reported=None) is None
    assert prices.tool_call("lookup", reported=None) == 0.001  # "*"
    assert prices.model_turn("gpt-x", 1000, 500) == pytest.approx(0.006)
    assert prices.model_turn("other", 1000, 500) is None
    assert prices.currency == "EUR"


def test_every_mistake_in_the_limits_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_limit_settings(
            {
                "limits": [
                    {"name": "Bad Name", "calls": 0, "every": "5x", "tool": ["a"]},
                    {"name": "twice", "calls": 1, "every": "1m", "per": ["user", "user"]},
                    "a string",
                ],
                "budgets": [{"name": "twice", "amount": -1, "every": "yearly"}],
                "costs": {"tools": {"a": -1}, "models": {"m": {"input": 1}}},
            }
        )
    fields = [(p.where, p.field) for p in caught.value.problems]

    assert fields == [
        ("toolbus.toml [[limits]]", "Bad Name.name"),
        ("toolbus.toml [[limits]]", "Bad Name.calls"),
        ("toolbus.toml [[limits]]", "Bad Name.every"),
        ("toolbus.toml [[limits]]", "Bad Name.tool"),
        ("toolbus.toml [[limits]]", "twice.per"),
        ("toolbus.toml [[limits]]", "#3"),
        ("toolbus.toml [[budgets]]", "twice.amount"),
        ("toolbus.toml [[budgets]]", "twice.every"),
        ("toolbus.toml [costs]", "models.m.input"),
        ("toolbus.toml [costs]", "tools.a"),
    ]
    text = str(caught.value)
    assert "is not a setting here; the settings are" in text and '"month"' in text


def test_a_name_is_one_limits_or_one_budgets_and_a_budget_needs_prices() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_limit_settings(
            {
                "limits": [{"name": "same", "calls": 1, "every": 1}],
                "budgets": [{"name": "same", "amount": 1, "every": "1d"}],
            }
        )
    messages = [p.message for p in caught.value.problems]
    assert any("the name is taken by an entry of [[limits]]" in m for m in messages)
    assert any("add a [costs] table" in m for m in messages)


# ------------------------------------------------------------------ a tool's cache


def _snapshot(tool: dict[str, Any]) -> dict[str, Any]:
    service = {"id": "s", "request-queue": "q-req", "response-queue": "q-resp"}
    base = {"type": "tool-service", "name": "t", "description": "d", "service": "s"}
    return {"tool-service": {"s": service}, "tool": {"t": {**base, **tool}}}


def test_a_read_only_tool_may_have_its_answers_cached() -> None:
    read_only = {"annotations": {"readOnlyHint": True}}
    plain = load_registry(_snapshot({**read_only, "cache": "5m"})).tool("t")
    shared = load_registry(_snapshot({**read_only, "cache": {"ttl": 30, "scope": "group"}})).tool(
        "t"
    )

    assert plain.cache == CachePolicy(300.0, "user")
    assert shared.cache == CachePolicy(30.0, "group")
    assert load_registry(_snapshot(read_only)).tool("t").cache is None


def test_a_cache_on_a_tool_not_declared_read_only_or_badly_written_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        load_registry(_snapshot({"cache": "5m"}))
    assert caught.value.problems[0].field == "cache"
    assert "readOnlyHint" in caught.value.problems[0].message

    with pytest.raises(ConfigError) as caught:
        load_registry(
            _snapshot(
                {
                    "annotations": {"readOnlyHint": True},
                    "cache": {"ttl": "soon", "scope": "everyone", "size": 1},
                }
            )
        )
    assert sorted(p.field for p in caught.value.problems) == ["cache", "cache.scope", "cache.ttl"]
