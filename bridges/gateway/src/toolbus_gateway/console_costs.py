"""The console's costs panel: what each user, tool and model cost, over the whole gateway.

Every audit record a process writes says what its session cost (its calls,
its model turns: ``[costs]`` of ``toolbus.toml``); :class:`CostTotals` adds
them up per user, per tool and per model since the process started, and each
process publishes its totals with its other figures, so the panel shows the
sums over every process. The budgets (``[[budgets]]``) are listed beside them,
with what each allows and per whom.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Literal

from toolbus.application.agent.audit import AuditRecord
from toolbus.application.doors.door import FrontDoor

Kind = Literal["user", "tool", "model"]
#: Names kept per kind; beyond, the smallest totals give way (a user-facing gateway may
#: see any number of users).
KEPT = 1000
#: Rows the panel shows per kind.
SHOWN = 20


@dataclass(frozen=True, slots=True)
class CostRow:
    """What one user, tool or model cost, and over how many priced calls or turns."""

    kind: Kind
    name: str
    amount: float
    count: int


class CostTotals:
    """This process's totals, from the audit records it writes; see the module docs."""

    def __init__(self) -> None:
        self._totals: dict[Kind, dict[str, tuple[float, int]]] = {
            "user": {},
            "tool": {},
            "model": {},
        }

    def add(self, record: AuditRecord) -> bool:
        """Count what ``record``'s session cost; whether it cost anything."""
        if record.cost is None:
            return False
        self._add("user", record.user, record.cost, 1)
        for call in record.calls:
            if call.cost is not None:
                self._add("tool", call.tool, call.cost, 1)
        agent = record.agent
        if agent is not None and agent.cost is not None:
            self._add("model", agent.model, agent.cost, agent.iterations)
        return True

    def _add(self, kind: Kind, name: str, amount: float, count: int) -> None:
        totals = self._totals[kind]
        before = totals.get(name, (0.0, 0))
        totals[name] = (before[0] + amount, before[1] + count)
        if len(totals) > KEPT:
            del totals[min(totals, key=lambda key: totals[key][0])]

    def rows(self) -> list[CostRow]:
        return [
            CostRow(kind, name, amount, count)
            for kind, totals in self._totals.items()
            for name, (amount, count) in totals.items()
        ]


def merged_costs(rows: Iterable[Sequence[CostRow]]) -> list[CostRow]:
    """Each user's, tool's and model's totals added up over the processes, largest first."""
    sums: dict[tuple[Kind, str], tuple[float, int]] = {}
    for each in rows:
        for row in each:
            amount, count = sums.get((row.kind, row.name), (0.0, 0))
            sums[row.kind, row.name] = (amount + row.amount, count + row.count)
    merged = [CostRow(kind, name, amount, count) for (kind, name), (amount, count) in sums.items()]
    merged.sort(key=lambda row: (-row.amount, row.kind, row.name))
    return merged


_HEADINGS: dict[Kind, tuple[str, str]] = {
    "user": ("user", "sessions"),
    "tool": ("tool", "calls"),
    "model": ("model", "turns"),
}


def costs_panel(door: FrontDoor | None, rows: Sequence[CostRow]) -> str:
    """The panel: totals by user, tool and model (the largest first), and the budgets."""
    prices = None if door is None else door.prices
    if prices is None:
        return (
            '<p class="empty">No prices are configured: add a [costs] table to toolbus.toml '
            "to see what calls and model turns cost.</p>"
        )
    currency = escape(prices.currency)
    parts = []
    for kind, (noun, counted) in _HEADINGS.items():
        mine = [row for row in rows if row.kind == kind][:SHOWN]
        if not mine:
            continue
        body = "".join(
            f'<tr data-{kind}="{escape(row.name)}"><td>{escape(row.name)}</td>'
            f'<td class="amount">{row.amount:.4f}</td><td>{row.count}</td></tr>'
            for row in mine
        )
        parts.append(
            f"<table><thead><tr><th>{noun}</th><th>cost ({currency})</th><th>{counted}</th>"
            f"</tr></thead><tbody>{body}</tbody></table>"
        )
    if not parts:
        parts.append('<p class="empty">Nothing has cost anything yet.</p>')
    budgets = None if door is None else door.budgets
    if budgets is not None and budgets.budgets:
        listed = "".join(
            f'<li data-budget="{escape(budget.name)}">{escape(budget.name)}: '
            f"{escape(budgets.describe(budget))} per {escape(_per(budget.per))}</li>"
            for budget in budgets.budgets
        )
        parts.append(f'<ul class="budgets">{listed}</ul>')
    return "".join(parts)


def _per(per: Sequence[str]) -> str:
    return " and ".join(per) if per else "everyone together"
