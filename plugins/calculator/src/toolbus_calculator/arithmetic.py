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
# Python refuses to print integers of more than 4,300 digits; stay below that
# (4,300 digits need 14,284 bits) so every answer can be written out.
MAX_BITS = 14_000

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
        return _value(tree.body)
    except SyntaxError:
        raise BadRequest(
            f"{expression!r} is not an arithmetic expression; use numbers, + - * / // % ** "
            "and parentheses"
        ) from None
    except (RecursionError, MemoryError):
        raise BadRequest("the expression is nested too deeply") from None


def _too_big(op: ast.operator, left: Number, right: Number) -> bool:
    """Whether an integer result would exceed MAX_BITS, judged before computing it."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return False  # float overflow raises OverflowError instead
    if isinstance(op, ast.Pow):
        return right > 0 and abs(left) > 1 and right * math.log2(abs(left)) > MAX_BITS
    if isinstance(op, ast.Mult):
        return left.bit_length() + right.bit_length() > MAX_BITS + 1
    return False


def _value(node: ast.expr) -> Number:
    # ``type(...) in`` rather than isinstance: True and False are ints to Python.
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value: Number = node.value  # type: ignore[assignment]
        if isinstance(value, float) and not math.isfinite(value):
            raise BadRequest(f"{ast.unparse(node)} is too large a number")
        if isinstance(value, int) and value.bit_length() > MAX_BITS:
            raise BadRequest("a number in the expression is too large")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise BadRequest(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        if _too_big(node.op, left, right):
            raise BadRequest("the result is too large to compute")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise BadRequest("division by zero") from None
        except OverflowError:
            raise BadRequest("the result is too large to compute") from None
        if isinstance(result, complex):
            raise BadRequest("the result is not a real number")
        if isinstance(result, int) and result.bit_length() > MAX_BITS:
            raise BadRequest("the result is too large to compute")
        if isinstance(result, float) and not math.isfinite(result):
            raise BadRequest("the result is too large to compute")
        return result
    raise BadRequest(
        f"{ast.unparse(node)!r} is not allowed; use numbers, + - * / // % ** and parentheses"
    )
