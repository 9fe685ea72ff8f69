"""Tool-service descriptors: models, loading and validation, the registry, tool lists for LLM APIs.

Importing names from this package itself is deprecated
(use its modules);
that path goes away in the next release.
"""

from __future__ import annotations

from typing import Any

from toolbus.domain._moved import forward


def __getattr__(name: str) -> Any:
    return forward(
        __name__,
        name,
        "toolbus.domain.config.descriptors",
        "toolbus.domain.config.parsing",
        "toolbus.domain.config.loading",
        # Reading files left the domain; the old path forwards by name only.
        "toolbus.application.live.config_files",
    )
