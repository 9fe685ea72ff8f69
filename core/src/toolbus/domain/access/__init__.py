"""Who may call what: group access checks and permission rules.

Importing names from this package itself is deprecated
(use :mod:`toolbus.domain.access.check`);
that path goes away in the next release.
"""

from __future__ import annotations

from typing import Any

from toolbus.domain._moved import forward


def __getattr__(name: str) -> Any:
    return forward(__name__, name, "toolbus.domain.access.check")
