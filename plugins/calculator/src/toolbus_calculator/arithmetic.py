"""Evaluating arithmetic safely: a small walk over Python's AST, never ``eval``.

Only numbers, ``+ - * / // % **``, unary ``+``/``-`` and parentheses are
allowed. Exponents and results are bounded so that ``9**9**9`` is refused
instead of eating the machine.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from toolbus.domain.errors import BadRequest

MAX_EXPRESSION = 1_000
MAX_EXPONENT = 10_000
MAX_DIGITS = 4_300  # Python's own default limit on int -> str conversion

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; :class:`BadRequest` explains what is wrong."""
    if not expression.strip():
        raise BadRequest("the expression is empty; give one like '2 * (3 + 4)'")
    if len(expression) > MAX_EXPRESSION:
        raise BadRequest(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise BadRequest(
            f"{expression!r} is not an arithmetic expression; use numbers, + - * / // % ** "
            "and parentheses"
        ) from None
    return _value(tree.body)


def _value(node: ast.expr) -> Number:
    # ``type(...) in`` rather than isinstance: True and False are ints to Python.
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value: Number = node.value  # type: ignore[assignment]
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise BadRequest(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise BadRequest("division by zero") from None
        except OverflowError:
            raise BadRequest("the result is too large to compute") from None
        if isinstance(result, complex):
            raise BadRequest("the result is not a real number")
        if isinstance(result, int) and result.bit_length() > MAX_DIGITS * 3.33:
            raise BadRequest("the result is too large to compute")
        if isinstance(result, float) and not math.isfinite(result):
            raise BadRequest("the result is too large to compute")
        return result
    raise BadRequest(
        f"{ast.unparse(node)!r} is not allowed; use numbers, + - * / // % ** and parentheses"
    )
