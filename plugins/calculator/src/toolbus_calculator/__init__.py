"""The calculator tool service: safe arithmetic, no ``eval``."""

from toolbus_calculator.arithmetic import evaluate
from toolbus_calculator.service import calculator_service

__all__ = ["calculator_service", "evaluate"]
