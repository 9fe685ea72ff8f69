"""Hook configuration: which tool to call at which seam of an agent request.

Hooks are pydantic discriminated unions on ``kind`` so that new kinds can be
added without touching existing ones. The field names are exactly those of a
DIAL Quick Apps manifest's ``hooks`` list, so such a list parses unchanged.

Unknown keys are rejected (``extra="forbid"``) and named, with a suggestion
when one is close: a misspelt ``refresh_conditon`` would otherwise be dropped
without a word and the hook would quietly call its tool on every request.
:func:`parse_hooks` reports every problem of every hook in one
:class:`~toolbus.domain.errors.ConfigError`; :func:`load_hooks` takes the list
from a configuration snapshot or from ``toolbus.toml``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal, TypeAlias, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.config.parsing import section_in_one_place
from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.hooks.injection import InjectionFrequency

#: The snapshot section, and the ``toolbus.toml`` array of tables, that hold hooks.
SECTION: Final = "hooks"

HookEvent: TypeAlias = Literal["on_request_start"]
"""The seam of an agent request at which a hook fires.

``on_request_start``: once per request, before the model is first asked
anything. Later seams join the ``Literal`` when the runtime grows them; until
then validation rejects them rather than accepting a hook that never fires.
"""

SUPPORTED_EVENTS: Final[tuple[str, ...]] = get_args(HookEvent)


def _supported_event(value: object) -> object:
    # Pydantic would say "Input should be 'on_request_start'"; name the culprit instead.
    if isinstance(value, str) and value not in SUPPORTED_EVENTS:
        supported = ", ".join(map(repr, SUPPORTED_EVENTS))
        raise ValueError(f"unsupported hook event {value!r}; supported events: {supported}")
    return value


def _not_bool(value: object) -> object:
    # Pydantic reads `true` as 1 for numbers; in a manifest that is a mistake, not a minute.
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


_Event = Annotated[HookEvent, BeforeValidator(_supported_event)]
_PositiveInt = Annotated[int, BeforeValidator(_not_bool), Field(gt=0)]
_PositiveSeconds = Annotated[float, BeforeValidator(_not_bool), Field(gt=0, allow_inf_nan=False)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TTLRefresh(_Model):
    """Reuse the injected result until ``ttl_minutes`` have passed, then call the tool again."""

    kind: Literal["ttl"] = "ttl"
    ttl_minutes: _PositiveInt

    def expiry(self, now: float) -> int:
        """The Unix second at which a result obtained at ``now`` stops being fresh."""
        return int(now) + self.ttl_minutes * 60


RefreshCondition: TypeAlias = Annotated[TTLRefresh, Field(discriminator="kind")]
"""When a hook may skip its tool call. One kind today; more join the union."""


class ToolCallHook(_Model):
    """Call a tool at ``event`` and inject its result as a synthetic tool call."""

    kind: Literal["tool_call"] = "tool_call"
    event: _Event
    name: str | None = None
    """A label for logs; no effect on behaviour."""
    toolset_name: str | None = None
    """Prefix of the call name (REST and MCP toolsets). ``None`` or ``""``: none."""
    tool_name: str = Field(min_length=1)
    """Tool within the toolset, or the final call name when there is no toolset."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    frequency: InjectionFrequency = "append_if_changed"
    refresh_condition: RefreshCondition | None = None
    timeout_seconds: _PositiveSeconds | None = None
    """Give up on the tool after this long; ``None``: the runtime's default."""

    @field_validator("arguments")
    @classmethod
    def _json_arguments(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Arguments are hashed as JSON into call ids; fail at load time, not mid-request.
        try:
            json.dumps(value, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be JSON-serialisable: {exc}") from None
        return value

    @property
    def call_name(self) -> str:
        """The function name the model sees for this tool."""
        if self.toolset_name:
            return sanitize_toolname(f"{self.toolset_name}_{self.tool_name}")
        return self.tool_name

    @property
    def display_name(self) -> str:
        """What logs call this hook: its ``name``, else its call name."""
        return self.name or self.call_name

    def ttl_expiry(self, now: float) -> int | None:
        """The expiry to stamp on a result obtained at ``now``; ``None`` without a TTL."""
        return self.refresh_condition.expiry(now) if self.refresh_condition else None


HookConfig: TypeAlias = Annotated[ToolCallHook, Field(discriminator="kind")]
"""Any configured hook. One kind today; more join the union."""

_HOOK_ADAPTER: TypeAdapter[ToolCallHook] = TypeAdapter(HookConfig)

# For error messages: the kinds allowed at the top level (key None) and under
# each field holding a discriminated union.
_KINDS: Final[dict[str | None, dict[str, type[BaseModel]]]] = {
    None: {"tool_call": ToolCallHook},
    "refresh_condition": {"ttl": TTLRefresh},
}


def parse_hooks(data: Any, *, source: str = "") -> tuple[HookConfig, ...]:
    """Validate a manifest's ``hooks``: a list of hook objects, or that list as JSON text.

    ``None`` means no hooks. Raises :class:`ConfigError` listing every problem,
    each naming the hook (``hook #0 ('name')``, 0-based like a JSON array) and
    the field. ``source`` says where the list came from, in front of each
    problem (``"toolbus.toml [[hooks]]"``).
    """
    prefix = f"{source} " if source else ""
    if isinstance(data, str | bytes | bytearray):
        try:
            data = json.loads(data)
        except ValueError as exc:
            problem = Problem(source or "hooks", "", f"is not valid JSON: {exc}")
            raise ConfigError([problem]) from None
    if data is None:
        return ()
    if not isinstance(data, list | tuple):
        message = f"must be a list of hook objects, not {type(data).__name__}"
        raise ConfigError([Problem(source or "hooks", "", message)])

    hooks: list[HookConfig] = []
    problems: list[Problem] = []
    for index, item in enumerate(data):
        try:
            hooks.append(_HOOK_ADAPTER.validate_python(item))
        except ValidationError as exc:
            where = prefix + _where(index, item)
            problems += [_problem(where, item, error) for error in exc.errors()]
    if problems:
        raise ConfigError(problems)
    return tuple(hooks)


def load_hooks(
    snapshot: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    *,
    settings_name: str = "toolbus.toml",
) -> tuple[HookConfig, ...]:
    """Hooks from a snapshot's ``hooks`` section or ``toolbus.toml``'s ``[[hooks]]`` tables.

    ``settings`` is the parsed ``toolbus.toml`` (``Settings.file``). At most one
    of the two may hold hooks, as with permissions: hooks run in the order they
    are listed, and two lists would leave that order to a rule the reader must
    remember. With neither there are no hooks. Raises :class:`ConfigError`
    listing every problem, each naming its source.
    """
    found = section_in_one_place(
        SECTION, snapshot, settings, settings_name=settings_name, settings_table=f"[[{SECTION}]]"
    )
    if found is None:
        return ()
    data, where = found
    return parse_hooks(data, source=where)


def _where(index: int, item: object) -> str:
    label: object = None
    if isinstance(item, Mapping):
        label = item.get("name")
        if not (isinstance(label, str) and label):
            tool, toolset = item.get("tool_name"), item.get("toolset_name")
            if isinstance(tool, str) and tool:
                ok_toolset = isinstance(toolset, str) and toolset
                label = sanitize_toolname(f"{toolset}_{tool}") if ok_toolset else tool
    return f"hook #{index} ({label!r})" if isinstance(label, str) and label else f"hook #{index}"


def _problem(where: str, item: object, error: ErrorDetails) -> Problem:
    path, owner = _path_without_tags(item, error["loc"])
    kind = error["type"]
    ctx = error.get("ctx", {})
    field_above = next((p for p in reversed(path) if isinstance(p, str)), None)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        expected = ", ".join(map(repr, _KINDS.get(field_above, {})))
        message = (
            f"unknown kind {ctx.get('tag')!r}; supported kinds: {expected}"
            if kind == "union_tag_invalid"
            else f"is required; supported kinds: {expected}"
        )
        path = (*path, "kind")
    elif kind == "extra_forbidden":
        message = _unknown_key_message(str(path[-1]), owner)
    elif kind == "missing":
        message = "is required"
    elif kind in ("model_attributes_type", "model_type"):
        message = f"must be an object, not {type(error['input']).__name__}"
    elif kind == "value_error" and "error" in ctx:
        message = str(ctx["error"])
    else:
        message = error["msg"]
    return Problem(where, ".".join(map(str, path)), message)


def _path_without_tags(
    item: object, loc: Sequence[int | str]
) -> tuple[tuple[int | str, ...], type[BaseModel] | None]:
    """Drop the discriminator tags pydantic puts in error locations.

    ``("tool_call", "refresh_condition", "ttl", "ttl_minutes")`` becomes
    ``("refresh_condition", "ttl_minutes")``, the way the user wrote it. Also
    returns the model that owns the last field, for unknown-key hints.
    """
    path: list[int | str] = []
    owner: type[BaseModel] | None = None
    node = item
    union_kinds: dict[str, type[BaseModel]] | None = _KINDS[None]  # a hook is a union itself
    for part in loc:
        # A tag follows a field holding a union; a key spelt like the tag ("ttl") is not one.
        if union_kinds is not None and isinstance(node, Mapping) and node.get("kind") == part:
            owner = union_kinds.get(str(part))
            union_kinds = None
            continue
        union_kinds = _KINDS.get(part) if isinstance(part, str) else None
        path.append(part)
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list | tuple) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(path), owner


def _unknown_key_message(key: str, owner: type[BaseModel] | None) -> str:
    if owner is None:
        return "unknown key"
    known = list(owner.model_fields)
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key; known keys: {', '.join(known)}"
