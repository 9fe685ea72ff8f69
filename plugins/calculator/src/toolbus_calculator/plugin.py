"""Registers the calculator service and its default ``calculate`` tool."""

from __future__ import annotations

from toolbus.plugins import ToolRegistrar, hookimpl
from toolbus_calculator.service import calculator_service


@hookimpl
def toolbus_register_tools(register: ToolRegistrar) -> None:
    register.service(
        calculator_service,
        tools={
            "calculate": {
                "name": "calculate",
                "description": "Evaluate an arithmetic expression such as '2 * (3 + 4)'",
                # Its argument comes from calculator_service's typed signature.
            }
        },
    )
