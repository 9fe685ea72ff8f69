"""A package's public names imported from their modules on first use (PEP 562).

Distributions whose libraries take seconds to import (FastAPI, the MCP SDK,
httpx and the OpenAPI parser) keep their package light this way, so that
loading their commands (``toolbus --help``, any ``toolbus`` command at all)
does not pay for them::

    __getattr__ = lazy_exports(__name__, {"Gateway": "gateway", "create_app": "app"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``homes`` from its module.

    ``homes`` maps a public name to the module under ``package`` that defines it.
    """

    def attribute(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return attribute
