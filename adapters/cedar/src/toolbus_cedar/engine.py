"""Cedar as toolbus's call policy: :class:`CedarEngine`.

Every call is one Cedar request: principal ``User::"<user>"`` (in the
``Group`` entities granted to its session, with the attributes
``[policy.users]`` gives), action ``Action::"call"``, resource
``Tool::"<tool>"`` (in its groups and ``Service``), context ``{"state",
"arguments"}``; :mod:`toolbus_cedar.schema` says the types. Cedar permits or
denies; toolbus reads three answers from that:

* denied: the call is refused; the forbidding policy's ``@reason("...")`` is
  what the model reads (none: "the access policy does not allow it");
* permitted by a policy annotated ``@approval`` (or ``@approval("<team>")``):
  the call waits for a person of that team (none: the default approvers);
* permitted otherwise: the call goes ahead.

A policy that cannot be evaluated on a call (an argument of the wrong type, an
attribute a user lacks and the policy did not test with ``has``) refuses it:
Cedar skips such a policy, and a skipped ``forbid`` must not let a call through.

Decisions are remembered by what the policies read (:mod:`toolbus_cedar.references`),
for the configuration and the policies in force; a change of either starts anew.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cedarpy
import orjson

from toolbus.domain.access.policy import (
    PERMIT,
    ApproveFirst,
    Forbid,
    PolicyDecision,
    PolicyRequest,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, Problem
from toolbus_cedar.fixes import explained, named_attribute, unknown_argument
from toolbus_cedar.reading import Located, PolicyText, read
from toolbus_cedar.reading import Problem as FileProblem
from toolbus_cedar.references import References, arguments_named, references
from toolbus_cedar.schema import (
    CallSchema,
    ValueProblem,
    call_schema,
    cedar_value,
    reads_plainly,
    user_problems,
)
from toolbus_cedar.watching import watch

log = logging.getLogger("toolbus.policy")

#: Decisions remembered per configuration and set of policies.
DECISIONS_KEPT = 8192
#: Principals (user and granted groups) whose entities are kept ready.
PRINCIPALS_KEPT = 1024
_ACTION = {"type": "Action", "id": "call"}
_WRONG_TYPES = "its arguments do not have the types its tool declares"
#: The types of JSON's scalar values as Python reads them; anything else is keyed by its JSON.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _files_of(paths: Sequence[Path]) -> tuple[list[Path], list[FileProblem]]:
    files: list[Path] = []
    problems: list[FileProblem] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.cedar"))
            if not found:
                problems.append(FileProblem(path, None, "holds no .cedar file; put policies in it"))
            files += found
        else:
            files.append(path)
    return files, problems


@dataclass(frozen=True, slots=True)
class Policies:
    """One reading of the policy files: the parsed set, and what each policy is."""

    text: PolicyText
    parsed: cedarpy.PolicySet
    reads: References

    @classmethod
    def load(cls, paths: Sequence[Path]) -> Policies | list[FileProblem]:
        files, problems = _files_of(paths)
        if problems:
            return problems
        text = read(files)
        if isinstance(text, list):
            return text
        if not text.policies:
            return [
                FileProblem(
                    files[0] if files else Path("."),
                    None,
                    "holds no policy, so every call would be refused; start from "
                    "permit(principal, action, resource); and forbid what must not happen",
                )
            ]
        return cls(text, cedarpy.PolicySet.from_str(text.text), references(text.json.values()))

    def teams(self) -> frozenset[str]:
        return frozenset(
            team
            for where in self.text.policies.values()
            if (team := where.annotations.get("approval"))
        )

    def problems(self, schema: CallSchema) -> list[Problem]:
        """The policies checked against ``schema``: every mistake, with its file and line."""
        result = cedarpy.validate_policies(self.text.text, schema.text)
        found = []
        reported: set[tuple[str, str | None]] = set()
        for error in result.errors:
            reported.add((error.policy_id, named_attribute(error.error)))
            found.append(self._problem(error.policy_id, explained(error.error, schema)))
        # Cedar types `context.arguments has ctiy` as false when no tool declares `ctiy`,
        # and checks nothing behind it: a misspelt name under the guard the docs recommend
        # would quietly turn a forbid off. Every argument a policy names must exist.
        for policy_id, policy in self.text.json.items():
            for name in sorted(arguments_named(policy) - schema.arguments.keys()):
                if (policy_id, name) not in reported:
                    message = (
                        f"names the argument {name!r} (context.arguments has {name} is never "
                        f"true, so the policy never applies); {unknown_argument(name, schema)}"
                    )
                    found.append(self._problem(policy_id, message))
        return found

    def _problem(self, policy_id: str, message: str) -> Problem:
        where = self.text.policies.get(policy_id)
        if where is None:
            return Problem("policy files", "", message)
        return Problem(f"policy file {where.file}, line {where.line}", "", message)


class Compiled:
    """The policies on one configuration: schema, tool entities, remembered decisions."""

    def __init__(
        self, policies: Policies, registry: Registry, users: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self.policies = policies
        self.schema = call_schema(registry.tools.values(), users)
        self.problems = policies.problems(self.schema)
        self._schema = cedarpy.Schema.from_str(self.schema.text)
        self._users = users
        tools = [_tool_entity(tool) for tool in registry.tools.values()]
        self._tools = cedarpy.Entities.from_json_str(json.dumps(tools), self._schema)
        self._principals: OrderedDict[tuple[str, tuple[str, ...]], cedarpy.Entities] = OrderedDict()
        self._decisions: OrderedDict[Any, PolicyDecision] = OrderedDict()
        self._lock = threading.Lock()

    def decide(self, request: PolicyRequest) -> PolicyDecision:
        if self.problems:
            return Forbid(
                "the access policy does not fit the configuration now; the operator must fix it"
            )
        reads = self.policies.reads
        types = self.schema.arguments
        names = types.keys() if reads.arguments is None else reads.arguments & types.keys()
        picked = {name: request.arguments[name] for name in names if name in request.arguments}
        key = _key(request, reads.state, picked)
        found = self._decisions.get(key) if key is not None else None
        if found is not None:
            return found
        try:
            arguments = {name: cedar_value(value, types[name]) for name, value in picked.items()}
        except ValueProblem as exc:
            return Forbid(f"an argument {exc}")
        # The schema's check of the request is a good part of Cedar's work per call (its
        # JSON reading, about a quarter here); values plainly of their types need none.
        plain = all(reads_plainly(value, types[name]) for name, value in picked.items())
        result = cedarpy.is_authorized(
            {
                "principal": {"type": "User", "id": request.user},
                "action": _ACTION,
                "resource": {"type": "Tool", "id": request.tool.name},
                "context": _context_json(request.state, arguments, plain),
            },
            self.policies.parsed,
            self._principal(request.user, request.groups),
            schema=None if plain else self._schema,
        )
        decision = self._decision(request, result)
        if key is not None:
            with self._lock:
                self._decisions[key] = decision
                if len(self._decisions) > DECISIONS_KEPT:
                    self._decisions.popitem(last=False)
        return decision

    def _principal(self, user: str, groups: tuple[str, ...]) -> cedarpy.Entities:
        key = (user, groups)
        found = self._principals.get(key)
        if found is None:
            attributes = {
                name: value
                for name, value in (self._users.get(user) or {}).items()
                if name in self.schema.user_attributes
            }
            entity = {
                "uid": {"type": "User", "id": user},
                "attrs": attributes,
                "parents": [{"type": "Group", "id": group} for group in groups],
            }
            found = self._tools.with_added_json_str(json.dumps([entity]))
            with self._lock:
                self._principals[key] = found
                if len(self._principals) > PRINCIPALS_KEPT:
                    self._principals.popitem(last=False)
        return found

    def _decision(self, request: PolicyRequest, result: cedarpy.AuthzResult) -> PolicyDecision:
        located = self.policies.text.policies
        errors = result.diagnostics.errors
        if errors:
            # Cedar's messages may quote argument values: the log names the tool only.
            if any("failed to build request" in error for error in errors):
                return Forbid(_WRONG_TYPES)
            log.warning(
                "a policy could not be evaluated on a call of %r (user %r); the call is refused",
                request.tool.name,
                request.user,
            )
            return Forbid("a policy could not be evaluated on this call")
        # In the files' order: Cedar lists the deciding policies in no fixed order, and the
        # reason given (the first forbidding policy's) must not change from call to call.
        deciding = set(result.diagnostics.reasons)
        reasons = [where for policy, where in located.items() if policy in deciding]
        if result.decision == cedarpy.Decision.Allow:
            for where in reasons:
                if "approval" in where.annotations:
                    return ApproveFirst(
                        where.annotations["approval"] or None,
                        where.annotations.get("reason"),
                        where.name,
                    )
            return PERMIT
        if reasons:
            return Forbid(reasons[0].annotations.get("reason"), reasons[0].name)
        return Forbid("no policy permits it")


def _key(request: PolicyRequest, state: bool, picked: dict[str, Any]) -> Any:
    """What the decision on ``request`` depends on, hashable; ``None`` when it cannot be.

    Values are kept apart by their JSON types: Python holds ``true == 1 == 1.0``
    (with equal hashes), but Cedar permits a Boolean ``true`` and refuses a
    number where the schema says Bool, so a decision made for one must never be
    found for the others.
    """
    values: Any = []
    for name, value in picked.items():
        kind = type(value)
        if kind not in _SCALARS:  # a list or an object: its JSON text keeps them apart too
            try:
                values = json.dumps(picked, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):  # not JSON: decided afresh every time
                return None
            break
        values.append((name, kind, value))
    else:
        values.sort()
        values = tuple(values)
    return (
        request.user,
        request.groups,
        request.tool.name,
        request.state if state else None,
        values,
    )


def _context_json(state: str, arguments: dict[str, Any], plain: bool) -> str:
    """The request's context as JSON text (given a dict, cedarpy copies the request and
    writes it with ``json.dumps``); orjson for values plainly typed, which it can write."""
    context = {"state": state, "arguments": arguments}
    return orjson.dumps(context).decode() if plain else json.dumps(context)


def _tool_entity(tool: Any) -> dict[str, Any]:
    parents = [{"type": "Group", "id": group} for group in tool.groups]
    attributes: dict[str, Any] = {"name": tool.name, "annotations": dict(tool.annotations)}
    if tool.service is not None:
        attributes["service"] = tool.service
        parents.append({"type": "Service", "id": tool.service})
    return {"uid": {"type": "Tool", "id": tool.name}, "attrs": attributes, "parents": parents}


def _as_config_error(problems: Sequence[FileProblem]) -> ConfigError:
    return ConfigError(Problem(problem.where, "", problem.message) for problem in problems)


class CedarEngine:
    """A :class:`toolbus.ports.PolicyEngine` on Cedar policy files; see the module docs.

    Args:
        paths: policy files, and folders of ``.cedar`` files (read in name order).
        users: attributes of users (``[policy.users]``).
        reload: follow changes to the files (a thread watches them).

    Raises :class:`ConfigError` for files that cannot be read or do not parse,
    naming each file and line.
    """

    def __init__(
        self,
        paths: Sequence[Path],
        users: Mapping[str, Mapping[str, Any]],
        *,
        reload: bool = True,
    ) -> None:
        self.paths = tuple(paths)
        wrong = user_problems(users)
        if wrong:
            raise ConfigError(
                Problem("toolbus.toml [policy]", where, message) for where, message in wrong
            )
        self.users = {user: dict(attributes) for user, attributes in users.items()}
        loaded = Policies.load(self.paths)
        if isinstance(loaded, list):
            raise _as_config_error(loaded)
        self._policies = loaded
        self._compiled: tuple[Registry, Policies, Compiled] | None = None
        self._last_registry: Registry | None = None
        self._changed = threading.Condition()
        #: Grows by one with every change of the files taken.
        self.generation = 0
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        if reload:
            self._watcher = watch(self.paths, self.reload, self._stop)

    # ------------------------------------------------------------------ the port

    def check(self, registry: Registry) -> list[Problem]:
        self._last_registry = registry
        return self._for(registry).problems

    def decide(self, registry: Registry, request: PolicyRequest) -> PolicyDecision:
        return self._for(registry).decide(request)

    def teams(self) -> frozenset[str]:
        return self._policies.teams()

    def describe(self, registry: Registry) -> str:
        return self._for(registry).schema.text

    @property
    def policy_count(self) -> int:
        """How many policies are in force."""
        return len(self._policies.text.policies)

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
            self._watcher = None

    # ------------------------------------------------------------------ changes

    def reload(self) -> list[Problem]:
        """Read the files again; take them if they are valid, else keep the policies in
        force. Returns what was wrong (empty: taken)."""
        loaded = Policies.load(self.paths)
        if isinstance(loaded, list):
            problems = list(_as_config_error(loaded).problems)
        else:
            registry = self._last_registry
            problems = [] if registry is None else loaded.problems(self._for(registry).schema)
        if problems:
            log.error(
                "the changed policy files were not taken; the policies in force stay:\n%s",
                "\n".join(f"  - {problem}" for problem in problems),
            )
            return problems
        assert not isinstance(loaded, list)
        with self._changed:
            self._policies = loaded
            self.generation += 1
            self._changed.notify_all()
        log.info("took the changed policy files (%d policies)", len(loaded.text.policies))
        return []

    def wait_for(self, generation: int, timeout: float) -> bool:
        """Block until the files changed ``generation`` times in all (tests, tools)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.generation >= generation, timeout)

    def _for(self, registry: Registry) -> Compiled:
        policies = self._policies
        compiled = self._compiled
        if compiled is None or compiled[0] is not registry or compiled[1] is not policies:
            made = Compiled(policies, registry, self.users)
            self._compiled = (registry, policies, made)
            return made
        return compiled[2]


def load(
    paths: Sequence[Path], users: Mapping[str, Mapping[str, Any]], options: Mapping[str, Any]
) -> CedarEngine:
    """The ``toolbus.policy_engines`` factory: ``options`` may say ``reload`` (default true)."""
    return CedarEngine(paths, users, reload=bool(options.get("reload", True)))


__all__ = ["CedarEngine", "Located", "load"]
