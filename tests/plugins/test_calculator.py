"""The calculator plugin: safe arithmetic, clear refusals, and errors over the bus."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbus.domain.errors import BadRequest
from toolbus.plugins import ToolRegistrar
from toolbus.testing import ToolTestKit
from toolbus_calculator import calculator_service, evaluate
from toolbus_calculator import plugin as calculator_plugin

ALLOWED = "use numbers, + - * / // % ** and parentheses"


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2", 3),
        ("2 + 3 * 4", 14),
        ("(2 + 3) * 4", 20),
        ("10 - 4 - 3", 3),  # left-associative
        ("2 ** 3 ** 2", 512),  # right-associative
        ("-2 ** 2", -4),  # ** binds tighter than unary minus
        ("(-2) ** 2", 4),
        ("-3", -3),
        ("+3", 3),
        ("--3", 3),
        ("-(4 - 6)", 2),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),  # floor, not truncation
        ("7 % 3", 1),
        ("-7 % 3", 2),
        ("2 ** -1", 0.5),
        ("1.5 * 4", 6.0),
        ("0.1 + 0.2", 0.1 + 0.2),
        ("1e3 + 1", 1001.0),
        ("7.5 // 2", 3.0),
        ("  6 * 7  ", 42),
        ("2 ** 10000", 2**10000),
    ],
)
def test_arithmetic(expression: str, value: float) -> None:
    result = evaluate(expression)

    assert result == value
    assert type(result) is type(value)


# Small expression trees, checked against Python's own arithmetic on the same text.
_numbers = st.integers(min_value=-50, max_value=50).map(str) | st.sampled_from(
    ["0.5", "2.25", "1e2"]
)
_expressions = st.recursive(
    _numbers,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda e: f"-{e}"),
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(_expressions)
def test_agrees_with_python_on_plus_minus_times(expression: str) -> None:
    expected = eval(expression, {"__builtins__": {}})  # the test's oracle, never the code's
    assert evaluate(expression) == pytest.approx(expected)


@pytest.mark.parametrize(
    "expression",
    [
        "abs(-1)",
        "__import__('os').system('true')",
        "x",
        "x + 1",
        "math.pi",
        "(1).real",
        "'a' * 3",
        "[1, 2]",
        "1 if 1 else 2",
        "1 < 2",
        "True + 1",
        "None",
        "1 & 3",
        "1 << 100",
        "~1",
        "lambda: 1",
        "(y := 2)",
        "1j",
    ],
)
def test_names_calls_attributes_and_other_syntax_are_refused(expression: str) -> None:
    with pytest.raises(BadRequest) as caught:
        evaluate(expression)

    assert "not allowed" in caught.value.message
    assert ALLOWED in caught.value.message


@pytest.mark.parametrize("expression", ["", "   ", "1 +", "2 * (3", "1 2", "import os", "1;2"])
def test_a_bad_expression_is_refused_with_the_expression_named(expression: str) -> None:
    with pytest.raises(BadRequest) as caught:
        evaluate(expression)

    message = caught.value.message
    if expression.strip():
        assert repr(expression) in message
    else:
        assert "empty" in message


def test_an_overlong_expression_is_refused() -> None:
    with pytest.raises(BadRequest, match="longer than"):
        evaluate("1+" * 5_000 + "1")


def test_deep_nesting_is_a_bad_request_not_a_crash() -> None:
    # Within the length limit, but deeper than Python's recursion limit allows.
    with pytest.raises(BadRequest):
        evaluate("-" * 999 + "1")


@pytest.mark.parametrize("expression", ["1 / 0", "1 // 0", "5 % 0", "0 ** -1", "1.5 / (2 - 2)"])
def test_division_by_zero(expression: str) -> None:
    with pytest.raises(BadRequest, match="division by zero"):
        evaluate(expression)


@pytest.mark.parametrize("expression", ["1e308 * 10", "1e999", "-1e999", "1e999 - 1e999"])
def test_results_that_are_not_finite_are_refused(expression: str) -> None:
    with pytest.raises(BadRequest, match="too large"):
        evaluate(expression)


def test_a_non_real_result_is_refused() -> None:
    with pytest.raises(BadRequest, match="not a real number"):
        evaluate("(-8) ** 0.5")


# Refused before they are computed: judged from their operands, so that refusing
# one holds no big number. Computing most of them would hold 1.7 MB to 150 MB (and
# take milliseconds to minutes); refusing any of them holds about 12 kB (the
# parse), so memory, which load cannot change, tells the two apart where time
# cannot. They run in a child process so that a regression fails after a minute
# instead of hanging the suite in a C-level big-integer loop no signal can interrupt.
HUGE = [
    "9 ** 9 ** 9",
    "2 ** 10001",
    "10 ** 5000",
    "(3 ** 9000) ** 10000",
    "(10 ** 4000) ** 10000",
    "(7 ** 5000) ** 9999 - 1",
    # 1.7 MB, computed in milliseconds: quick, and still too large to answer.
    "(2 ** 9000) ** 1500",
]
#: Bytes a refusal may hold at its peak.
REFUSAL_PEAK = 1024 * 1024


def test_huge_powers_are_refused_before_they_are_computed() -> None:
    script = textwrap.dedent(
        f"""
        import json, tracemalloc
        from toolbus.domain.errors import BadRequest
        from toolbus_calculator import evaluate
        evaluate("1 + 1")  # what is imported or cached once is not counted below
        tracemalloc.start()
        results = {{}}
        for expression in {HUGE!r}:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            try:
                evaluate(expression)
                outcome = "computed"
            except BadRequest as exc:
                outcome = exc.message
            results[expression] = [outcome, tracemalloc.get_traced_memory()[1] - before]
        print(json.dumps(results))
        """
    )
    try:
        child = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("evaluating a huge power took more than 60 s: it was computed, not refused")
    assert child.returncode == 0, child.stderr
    results = json.loads(child.stdout)
    for expression in HUGE:
        outcome, peak = results[expression]
        assert "too large" in outcome, (expression, outcome)
        assert peak < REFUSAL_PEAK, f"refusing {expression} held {peak} bytes: it was computed"


def test_every_number_it_answers_can_be_written_out() -> None:
    # Python refuses to print ints of more than 4300 digits; the calculator must
    # refuse to compute them rather than answer with a number it cannot show.
    for exponent in (4299, 4300, 4305, 4310):
        try:
            value = evaluate(f"10 ** {exponent}")
        except BadRequest as exc:
            assert "too large" in exc.message
        else:
            assert len(str(value)) == exponent + 1


def test_the_plugin_registers_calculator_and_calculate_as_the_issue_describes() -> None:
    registrar = ToolRegistrar()
    calculator_plugin.toolbus_register_tools(register=registrar)

    assert registrar.services == [calculator_service]
    assert registrar.service_descriptors == {
        "calculator": {
            "id": "calculator",
            "request-queue": "non-persistent://tg/request/calc",
            "response-queue": "non-persistent://tg/response/calc",
            "config-params": [],
        }
    }
    tool = registrar.tools["calculate"]
    assert (tool["type"], tool["service"], tool["name"]) == (
        "tool-service",
        "calculator",
        "calculate",
    )
    assert [argument["name"] for argument in tool["arguments"]] == ["expression"]
    # The typed function publishes the same argument in its JSON Schema.
    assert calculator_service.arguments_schema is not None
    assert calculator_service.arguments_schema["required"] == ["expression"]


# --- over the in-memory bus -------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("expression", "answer"),
    [("6 * 7", "42"), ("1 / 4", "0.25"), ("8 / 2", "4"), ("2 ** 0.5", str(2**0.5))],
)
async def test_served_on_the_bus(toolbus: ToolTestKit, expression: str, answer: str) -> None:
    await toolbus.serve(calculator_service)

    assert await toolbus.call(calculator_service, {"expression": expression}) == answer


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"expression": "1 / 0"}, "division by zero"),
        ({"expression": "open('/etc/passwd')"}, "not allowed"),
        ({"expression": "9 ** 9 ** 9"}, "too large"),
        ({"expression": "2 *"}, "not an arithmetic expression"),
        ({}, "expression"),
        ({"expression": ["1 + 1"]}, "expression"),
        ({"expression": "10 ** 4305"}, "too large"),
    ],
)
async def test_over_the_bus_a_refusal_arrives_as_bad_request(
    toolbus: ToolTestKit, arguments: dict[str, object], fragment: str
) -> None:
    await toolbus.serve(calculator_service)

    with pytest.raises(BadRequest) as caught:
        await toolbus.call(calculator_service, arguments)

    assert caught.value.error_type == "bad-request"
    assert fragment in caught.value.message
    # The service is still up.
    assert await toolbus.call(calculator_service, {"expression": "1 + 1"}) == "2"
    assert toolbus.client.pending == 0
