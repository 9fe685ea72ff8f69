"""Old import paths kept for one release: each forwards a name to the module now holding it.

A module that moved leaves behind a module-level ``__getattr__`` that calls
:func:`forward`, so ``from toolbus.application.client import ToolServiceClient``
still works and says where the name lives now. Pure (it imports by name only
when an old path is used), so the domain may hold it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def forward(old: str, name: str, *new: str) -> Any:
    """``name`` from the first of the ``new`` modules that has it, with a DeprecationWarning."""
    if not name.startswith("__"):
        for target in new:
            module = importlib.import_module(target)
            if hasattr(module, name):
                warnings.warn(
                    f"importing {name} from {old} is deprecated and stops working in the next"
                    f" release: import it from {target}",
                    DeprecationWarning,
                    stacklevel=3,
                )
                return getattr(module, name)
    raise AttributeError(f"module {old!r} has no attribute {name!r}")


#: Names replaced by another: old name -> (the module holding the new one, or None for
#: the same module; the new name; why).
RENAMED: dict[str, tuple[str | None, str, str]] = {
    "ToolAccessDenied": (None, "AccessDenied", "which every access refusal raises"),
    "ToolInvocation": (None, "CallResult", "which every call on the calling side returns"),
    "NatsOptionError": (
        "toolbus.domain.errors",
        "BrokerOptionError",
        "which every broker adapter raises for a bad URL or option",
    ),
    "KafkaOptionsError": (
        "toolbus.domain.errors",
        "BrokerOptionError",
        "which every broker adapter raises for a bad URL or option",
    ),
}


def renamed(module: str, name: str) -> Any:
    """The object an old name in ``module`` stood for, with a DeprecationWarning."""
    if name in RENAMED:
        home, new, why = RENAMED[name]
        warnings.warn(
            f"{name} is deprecated and stops working in the next release: use {new}"
            + (f" (from {home})" if home else "")
            + f", {why}",
            DeprecationWarning,
            stacklevel=3,
        )
        return getattr(importlib.import_module(home or module), new)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")
