"""Cedar decides on every argument value as its schema types it, with or without the schema.

The engine hands Cedar values plainly of their declared types without the
schema's check of the request (a quarter of Cedar's work per call), and every
other value with it. Whatever the value, the decision must be the one Cedar
makes with the schema checking the request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolbus.domain.access.policy import Forbid, PolicyRequest
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.plugins import load_policy_engine
from toolbus.ports import PolicyEngine

cedar_schema = pytest.importorskip("toolbus_cedar.schema")
cedar_engine = pytest.importorskip("toolbus_cedar.engine")

POLICY = """
permit(principal, action, resource);

@reason("not that name")
forbid(principal, action, resource)
when { context.arguments has name && context.arguments.name == "mallory" };

@reason("too many")
forbid(principal, action, resource)
when { context.arguments has count && context.arguments.count > 1000 };

@reason("not on a dry run")
forbid(principal, action, resource)
when { context.arguments has dry && context.arguments.dry };

@reason("too dear")
forbid(principal, action, resource)
when { context.arguments has price && context.arguments.price.greaterThan(decimal("9.5")) };

@reason("a banned tag")
forbid(principal, action, resource)
when { context.arguments has tags && context.arguments.tags.contains("banned") };

@reason("the wrong flags")
forbid(principal, action, resource)
when { context.arguments has flags && context.arguments.flags.contains(true) };
"""

ARGUMENTS = [
    {"name": "name", "type": "string", "description": "a name"},
    {"name": "count", "type": "integer", "description": "how many"},
    {"name": "dry", "type": "boolean", "description": "pretend"},
    {"name": "price", "type": "number", "description": "a price"},
    {"name": "tags", "type": "array", "items": {"type": "string"}, "description": "tags"},
    {"name": "flags", "type": "array", "items": {"type": "boolean"}, "description": "flags"},
]


def registry() -> Registry:
    return load_registry(
        {
            "tool-service": {
                "shop": {"id": "shop", "request-queue": "shop-q", "response-queue": "shop-r"}
            },
            "tool": {
                "buy": {
                    "type": "tool-service",
                    "name": "buy",
                    "description": "buy",
                    "service": "shop",
                    "arguments": [{**a, "required": False} for a in ARGUMENTS],
                }
            },
        }
    )


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "calls.cedar"
    path.write_text(POLICY)
    return path


def engine_on(path: Path) -> PolicyEngine:
    found: PolicyEngine = load_policy_engine("cedar", [path], {}, {"reload": False})
    return found


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, 1000, 1001, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([9.5, 9.5001, 10, 1.0, 0.5])
    | st.sampled_from(["mallory", "alice", "banned", "", "1.5"])
    | st.text(max_size=5)
)
escapes = st.sampled_from(  # objects Cedar's JSON reads as other kinds of value
    [
        {"__extn": {"fn": "decimal", "arg": "9.6"}},
        {"__extn": {"fn": "ip", "arg": "10.0.0.1"}},
        {"__entity": {"type": "User", "id": "carol"}},
    ]
)
values = (
    escapes
    | json_scalars
    | st.lists(escapes | json_scalars, max_size=2)
    | st.lists(json_scalars, max_size=3)
    | st.dictionaries(st.text(max_size=3), json_scalars, max_size=2)
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    arguments=st.dictionaries(st.sampled_from([a["name"] for a in ARGUMENTS]), values, max_size=3)
)
def test_every_value_is_decided_as_with_the_schema_checking_the_request(
    policy_file: Path, arguments: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = registry()
    request = PolicyRequest("carol", ("default",), tools.tools["buy"], "undefined", arguments)

    decided = engine_on(policy_file).decide(tools, request)
    with monkeypatch.context() as patched:  # every request checked by the schema
        patched.setattr(cedar_engine, "reads_plainly", lambda value, cedar: False)
        reference = engine_on(policy_file).decide(tools, request)

    assert decided == reference, arguments


@pytest.mark.parametrize(
    ("value", "cedar", "plain"),
    [
        ("x", "String", True),
        (5, "Long", True),
        (True, "Long", False),  # a JSON true is no number
        (2**63, "Long", False),  # beyond Cedar's Long: the schema refuses it
        (True, "Bool", True),
        (1, "Bool", False),
        (["a", "b"], "Set<String>", True),
        (["a", 1], "Set<String>", False),
        (2.0, "Long", True),  # written as the whole number it is
        (2.5, "Long", False),
        (float(2**63), "Long", False),
        (1.5, "decimal", True),  # written as Cedar's decimal
        (True, "decimal", False),
        ({"__extn": {"fn": "decimal", "arg": "1.5"}}, "decimal", False),  # the schema decides
        ("1.5", "decimal", False),
        (None, "String", False),
    ],
)
def test_what_cedar_reads_plainly(value: Any, cedar: str, plain: bool) -> None:
    assert cedar_schema.reads_plainly(value, cedar) is plain


def test_of_two_policies_forbidding_a_call_the_first_in_the_files_gives_the_reason(
    policy_file: Path,
) -> None:
    # Cedar names the deciding policies in no fixed order; the reason must not vary.
    tools = registry()
    arguments = {"count": 5000, "name": "mallory"}
    request = PolicyRequest("carol", ("default",), tools.tools["buy"], "undefined", arguments)

    reasons = {engine_on(policy_file).decide(tools, request) for _ in range(30)}

    assert reasons == {Forbid("not that name", "calls.cedar:4")}
