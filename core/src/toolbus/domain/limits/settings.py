"""The operator's limits: ``[[limits]]``, ``[[budgets]]`` and ``[costs]`` of ``toolbus.toml``.

::

    [[limits]]                     # how often calls may be made
    name = "search-per-user"       # names it in refusals, audit records and metrics
    calls = 60                     # this many calls...
    every = "1m"                   # ...per this long
    algorithm = "sliding-window"   # or "token-bucket" (bursts of `calls`, then the rate)
    tools = ["search"]             # calls of these tools (absent: of every tool)
    users = ["alice"]              # by these users (absent: anyone)
    groups = ["free"]              # made with one of these groups (absent: any)
    per = ["user"]                 # counted apart for each user (the default), "group",
                                   # "tool", several, or [] (one count for everyone)

    [costs]
    currency = "USD"
    [costs.models."gpt-4o-mini"]   # a model's price per million tokens
    input-per-million = 0.15
    output-per-million = 0.60
    [costs.tools]                  # a tool's price per call, or "reported": what the
    search = 0.002                 # tool says its call cost ("*": any other tool)
    geocode = "reported"

    [[budgets]]                    # how much may be spent
    name = "daily"
    amount = 5.0                   # in the currency of [costs]
    every = "1d"                   # the period (UTC days here; or "month")
    per = ["user"]                 # each user's own (the default), "group", or []
    users = ["alice"]              # optional, as for limits
    groups = ["free"]

Names are unique among limits and budgets: a refusal names exactly one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from toolbus.domain.config.durations import parse_duration
from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.limits.periods import Period
from toolbus.domain.limits.rates import Algorithm, Rate

LIMITS = "limits"
BUDGETS = "budgets"
COSTS = "costs"
#: What a tool's price may say instead of a number: the tool reports its calls' cost.
REPORTED = "reported"
#: In ``[costs.tools]`` and ``[costs.models]``: the price of any tool or model not named.
ANY = "*"
#: Every name a limit or budget may have: short, and fit for a metric's label.
NAME = r"^[a-z0-9][a-z0-9_-]{0,63}$"

Dimension = Literal["user", "group", "tool"]
BudgetDimension = Literal["user", "group"]


def _duration(value: Any) -> float:
    return parse_duration(value)


def _period(value: Any) -> Period:
    return Period.parse(value)


Duration = Annotated[float, BeforeValidator(_duration)]


class _Table(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        allow_inf_nan=False,
        arbitrary_types_allowed=True,
    )


class _Selected(_Table):
    """Whose calls a limit or budget counts, and what it counts apart."""

    users: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None

    @field_validator("per", check_fields=False)
    @classmethod
    def _once_each(cls, per: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(per)) != len(per):
            raise ValueError(f"names a dimension twice: {list(per)}; name each once")
        return per

    def _selects(self, user: str, groups: Sequence[str]) -> bool:
        if self.users is not None and user not in self.users:
            return False
        return self.groups is None or any(group in self.groups for group in groups)

    def _scopes(
        self, per: Sequence[str], user: str, groups: Sequence[str], tool: str | None
    ) -> tuple[str, ...]:
        """The counters a call is counted in: one, or one per group it counts for."""
        if not per:
            return ("everyone",)
        choices: list[list[str]] = []
        for dimension in per:
            if dimension == "user":
                choices.append([f"user={user}"])
            elif dimension == "tool":
                choices.append([f"tool={tool}"])
            else:
                counted = [g for g in groups if self.groups is None or g in self.groups]
                choices.append([f"group={group}" for group in counted])
        return tuple("/".join(parts) for parts in itertools.product(*choices))


class Limit(_Selected):
    """One ``[[limits]]`` entry; see the module docs."""

    name: str = Field(pattern=NAME)
    calls: int = Field(ge=1)
    every: Duration
    algorithm: Algorithm = "sliding-window"
    tools: tuple[str, ...] | None = None
    per: tuple[Dimension, ...] = ("user",)

    @property
    def rate(self) -> Rate:
        return Rate(self.calls, self.every, self.algorithm)

    def counters(self, user: str, groups: Sequence[str], tool: str) -> tuple[str, ...]:
        """The counters a call of ``tool`` by ``user`` with ``groups`` is counted in (none:
        the limit does not count it)."""
        if self.tools is not None and tool not in self.tools:
            return ()
        if not self._selects(user, groups):
            return ()
        return self._scopes(self.per, user, groups, tool)


class Budget(_Selected):
    """One ``[[budgets]]`` entry; see the module docs."""

    name: str = Field(pattern=NAME)
    amount: float = Field(gt=0)
    period: Annotated[Period, BeforeValidator(_period)] = Field(alias="every")
    per: tuple[BudgetDimension, ...] = ("user",)

    def counters(self, user: str, groups: Sequence[str]) -> tuple[str, ...]:
        """The counters ``user``'s spending with ``groups`` adds to (none: not this budget's)."""
        if not self._selects(user, groups):
            return ()
        return self._scopes(self.per, user, groups, None)


class ModelPrice(_Table):
    """A model's price per million input and output tokens."""

    input_per_million: float = Field(0.0, alias="input-per-million", ge=0)
    output_per_million: float = Field(0.0, alias="output-per-million", ge=0)


class Prices(_Table):
    """The ``[costs]`` table: what model turns and tool calls cost; see the module docs."""

    currency: str = Field("USD", min_length=1, max_length=16)
    models: dict[str, ModelPrice] = Field(default_factory=dict)
    tools: dict[str, Annotated[float, Field(ge=0)] | Literal["reported"]] = Field(
        default_factory=dict
    )

    def tool_call(self, tool: str, reported: float | None) -> float | None:
        """What a call of ``tool`` cost (``reported``: what the tool said); ``None`` when
        no price is configured for it, or it is to report its cost and did not."""
        price = self.tools.get(tool)
        if price is None:
            price = self.tools.get(ANY)
        if price is None or price == REPORTED:
            return reported if price == REPORTED else None
        return float(price)

    def model_turn(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """What a model turn of ``model`` cost; ``None`` when no price is configured for it."""
        price = self.models.get(model) or self.models.get(ANY)
        if price is None:
            return None
        return (
            input_tokens * price.input_per_million + output_tokens * price.output_per_million
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class LimitSettings:
    """Every limit, budget and price ``toolbus.toml`` gives (:func:`parse_limit_settings`)."""

    limits: tuple[Limit, ...] = ()
    budgets: tuple[Budget, ...] = ()
    prices: Prices | None = None


def parse_limit_settings(settings: Mapping[str, Any] | None) -> LimitSettings:
    """The ``[[limits]]``, ``[[budgets]]`` and ``[costs]`` of ``settings`` (the parsed
    ``toolbus.toml``); :class:`ConfigError` names every problem."""
    settings = settings or {}
    problems: list[Problem] = []
    limits = _entries(settings.get(LIMITS), Limit, "toolbus.toml [[limits]]", problems)
    budgets = _entries(settings.get(BUDGETS), Budget, "toolbus.toml [[budgets]]", problems)
    prices = None
    table = settings.get(COSTS)
    if table is not None:
        if not isinstance(table, Mapping):
            problems.append(Problem("toolbus.toml [costs]", "", "must be a table"))
        else:
            try:
                prices = Prices.model_validate(dict(table))
            except ValidationError as exc:
                problems.extend(_problems(exc, "toolbus.toml [costs]", "", Prices))
    seen: dict[str, str] = {}
    for kind, entries in (("[[limits]]", limits), ("[[budgets]]", budgets)):
        for entry in entries:
            if entry.name in seen:
                problems.append(
                    Problem(
                        f"toolbus.toml {kind}",
                        entry.name,
                        f"the name is taken by an entry of {seen[entry.name]}; every limit "
                        "and budget needs a name of its own (refusals name it)",
                    )
                )
            seen.setdefault(entry.name, kind)
    if budgets and prices is None:
        problems.append(
            Problem(
                "toolbus.toml [[budgets]]",
                "",
                "a budget counts what calls cost, and [costs] gives no prices; add a [costs] "
                "table with the prices of your models and tools",
            )
        )
    if problems:
        raise ConfigError(problems)
    return LimitSettings(tuple(limits), tuple(budgets), prices)


_Entry = TypeVar("_Entry", bound="_Table")


def _entries(value: Any, model: type[_Entry], where: str, problems: list[Problem]) -> list[_Entry]:
    if value is None:
        return []
    if not isinstance(value, list):
        section = where.removeprefix("toolbus.toml ")
        problems.append(
            Problem(where, "", f"must be an array of tables: write each entry as {section}")
        )
        return []
    found: list[_Entry] = []
    for index, entry in enumerate(value):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        label = str(name) if isinstance(name, str) and name else f"#{index + 1}"
        if not isinstance(entry, Mapping):
            problems.append(Problem(where, label, "must be a table"))
            continue
        try:
            found.append(model.model_validate(dict(entry)))
        except ValidationError as exc:
            problems.extend(_problems(exc, where, label, model))
    return found


def _problems(
    exc: ValidationError, where: str, label: str, model: type[BaseModel]
) -> list[Problem]:
    settings = ", ".join(field.alias or name for name, field in model.model_fields.items())
    found: dict[str, Problem] = {}
    for error in exc.errors():
        parts = [str(part) for part in error["loc"]]
        if parts[:1] == ["tools"] and len(parts) > 2:
            # One of a union's members: say what the value may be, once.
            parts = parts[:2]
            message = 'must be a price per call (a number, 0 or more), or "reported"'
        elif error["type"] == "extra_forbidden":
            message = f"is not a setting here; the settings are {settings}"
        elif error["type"] == "missing":
            message = "is required"
        elif parts[-1:] == ["name"] and error["type"] == "string_pattern_mismatch":
            message = (
                "must be 1 to 64 lower-case letters, digits, '-' and '_', starting with a "
                "letter or digit (it names the limit in refusals and metrics)"
            )
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
        field_name = ".".join(part for part in (label, *parts) if part)
        found.setdefault(field_name, Problem(where, field_name, message))
    return list(found.values())
