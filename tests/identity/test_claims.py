"""The claims checks are plain functions: every refusal, and what a valid token yields."""

from __future__ import annotations

from typing import Any

import pytest

from toolbus.domain.errors import Unauthorized
from toolbus.domain.identity import Caller, body_digest, call_claims, check_claims

NOW = 1_800_000_000.0
BODY = b'{"user": "alice", "config": "{}", "arguments": "{}"}'


def claims(**changes: Any) -> dict[str, Any]:
    made = call_claims(
        user="alice",
        groups=["read"],
        audience="joke-service",
        call_id="c-1",
        body=BODY,
        now=NOW,
        lifetime=30,
    )
    made.update(changes)
    return {k: v for k, v in made.items() if v is not None}


def check(given: dict[str, Any], *, now: float = NOW, user: str = "alice", **call: Any) -> Caller:
    return check_claims(
        given,
        audiences=call.get("audiences", {"joke-service", "non-persistent://tg/request/joke"}),
        call_id=call.get("call_id", "c-1"),
        user=user,
        body=call.get("body", BODY),
        now=now,
        leeway=5,
        key_id="k1",
    )


def test_a_valid_token_names_the_verified_caller() -> None:
    assert check(claims()) == Caller("alice", ("read",), True, "k1")


def test_the_audience_may_be_the_request_queue_or_a_list() -> None:
    assert check(claims(aud="non-persistent://tg/request/joke")).verified
    assert check(claims(aud=["other", "joke-service"])).verified


@pytest.mark.parametrize(
    ("given", "now", "reason"),
    [
        (claims(), NOW + 36, "expired"),
        (claims(), NOW - 6, "not valid yet"),
        (claims(nbf=None), NOW - 6, "issued in the future"),
        (claims(exp=None), NOW, "no valid 'exp'"),
        (claims(exp="soon"), NOW, "no valid 'exp'"),
        (claims(exp=True), NOW, "no valid 'exp'"),
        (claims(exp=float("nan")), NOW, "no valid 'exp'"),
        (claims(nbf=True), NOW, "no valid 'nbf'"),
        (claims(nbf=float("inf")), NOW, "no valid 'nbf'"),
        (claims(iat="now"), NOW, "no valid 'iat'"),
        (claims(iat=NOW + 10.5), NOW, "issued in the future"),
        (claims(aud="calculator"), NOW, "another tool service"),
        (claims(aud=None), NOW, "another tool service"),
        (claims(aud=7), NOW, "another tool service"),
        (claims(jti="c-2"), NOW, "another call id"),
        (claims(jti=None), NOW, "no valid 'jti'"),
        (claims(req=body_digest(b"{}")), NOW, "another request body"),
        (claims(req=None), NOW, "another request body"),
        (claims(sub="mallory"), NOW, "names user 'alice' but the call token is for 'mallory'"),
        (claims(sub=None), NOW, "no valid 'sub'"),
        (claims(groups="read"), NOW, "must be a list of group names"),
        (claims(groups=[1]), NOW, "must be a list of group names"),
    ],
)
def test_each_mismatch_is_refused_with_its_reason(
    given: dict[str, Any], now: float, reason: str
) -> None:
    with pytest.raises(Unauthorized, match=reason) as refused:
        check(given, now=now)
    assert refused.value.error_type == "unauthorized"


def test_times_may_be_json_fractions() -> None:
    assert check(claims(exp=NOW + 0.5, nbf=NOW - 0.5, iat=NOW - 0.5), now=NOW).verified


def test_an_empty_call_id_is_no_match_for_an_empty_jti() -> None:
    with pytest.raises(Unauthorized, match="no valid 'jti'"):
        check(claims(jti=""), call_id="")


def test_clock_difference_within_the_leeway_is_forgiven() -> None:
    assert check(claims(), now=NOW - 4).verified
    assert check(claims(), now=NOW + 30 + 4).verified
