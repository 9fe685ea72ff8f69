"""The ``calculator`` tool service: one typed argument, ``expression``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from toolbus import tool_service
from toolbus_calculator.arithmetic import evaluate


@tool_service(
    "calculator",
    request_queue="non-persistent://tg/request/calc",
    response_queue="non-persistent://tg/response/calc",
)
def calculator_service(
    expression: Annotated[str, Field(description="The arithmetic expression to evaluate")],
) -> str:
    """Evaluate an arithmetic expression."""
    value = evaluate(expression)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
