"""The fault matrix's report: every fault's figures, printed as a table when the run ends.

Each test adds its :class:`~tests.faults.load.Figures` (broker faults) or
:class:`StoreFigures` (a state store stopped under the doors) here; the
package's ``conftest.py`` prints them once the tests are done, and with
``TOOLBUS_FAULT_REPORT=path`` also writes them there as JSON, one object a line.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from tests.faults.load import HEADER, Figures

#: Set to a path to keep the figures as JSON lines.
REPORT_FILE = "TOOLBUS_FAULT_REPORT"


@dataclass(frozen=True)
class StoreFigures:
    """What stopping a state store did to one door's calls."""

    store: str
    door: str
    #: Seconds from the store listening again until the door's session went on (in
    #: the state it had reached).
    recovered: float
    #: The longest the door took to answer while the store was away.
    slowest: float
    #: How the door answered while the store was away.
    answers: dict[str, int]

    def row(self) -> str:
        answers = ", ".join(f"{count}× {what}" for what, count in sorted(self.answers.items()))
        return (
            f"| {self.store} | {self.door} | {answers} within {self.slowest:.2f} s | "
            f"{self.recovered:.2f} s |"
        )


STORE_HEADER = (
    "| store | door | answers while it was away | its session goes on after |\n|---|---|---|---|"
)

FIGURES: list[Figures] = []
STORE_FIGURES: list[StoreFigures] = []


def lines() -> list[str]:
    """The report, as Markdown tables."""
    out: list[str] = []
    if FIGURES:
        out += ["fault matrix: brokers", HEADER, *(f.row() for f in FIGURES)]
    if STORE_FIGURES:
        out += ["", "fault matrix: state stores", STORE_HEADER, *(f.row() for f in STORE_FIGURES)]
    return out


def write() -> None:
    """Append the figures to ``$TOOLBUS_FAULT_REPORT``, when it is set."""
    path = os.environ.get(REPORT_FILE)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        for figures in [*FIGURES, *STORE_FIGURES]:
            record: dict[str, Any] = {"kind": type(figures).__name__}
            record.update(dataclasses.asdict(figures))
            out.write(json.dumps(record, allow_nan=True) + "\n")
