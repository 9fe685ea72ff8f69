"""Argument options on a tool descriptor: defaults, fixed values and environment values.

    "options": {
        "args": {"defaults": {"limit": 10}, "fixed": {"tenant": "{user}"}},
        "envs": {"api_key": "WEATHER_API_KEY"}
    }

* ``defaults`` apply only when the LLM left the key out (an explicit ``null``
  counts as given).
* ``fixed`` always overwrite, and are hidden from the LLM.
* ``envs`` name environment variables of the *tool service* process. The
  agent sends only the names (message property ``env-args``); the service
  resolves them at call time, so a secret never crosses the bus. Hidden from
  the LLM.

Precedence, strongest first: env > fixed > LLM value > default. String defaults
and fixed values may use the placeholders ``{user}``, ``{request_id}``,
``{tool_call_id}``, ``{trace_id}`` and ``{state}``; an unknown placeholder
stays as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PLACEHOLDERS = frozenset({"user", "request_id", "tool_call_id", "trace_id", "state"})
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")
# Environment variable names a POSIX shell accepts; anything else is a typo.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class ArgumentOptions:
    """A tool's parsed ``options``."""

    defaults: Mapping[str, Any] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    envs: Mapping[str, str] = field(default_factory=dict)

    @property
    def hidden(self) -> frozenset[str]:
        """Argument names the LLM must not see: fixed and env-injected ones."""
        return frozenset(self.fixed) | frozenset(self.envs)

    def __bool__(self) -> bool:
        return bool(self.defaults or self.fixed or self.envs)


NO_OPTIONS = ArgumentOptions()


@dataclass(frozen=True, slots=True)
class AppliedOptions:
    """The arguments to send, and which keys the options touched (names only)."""

    arguments: dict[str, Any]
    defaulted: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


def render(value: Any, context: Mapping[str, str]) -> Any:
    """Fill known placeholders in a string; other values and unknown placeholders stay."""
    if not isinstance(value, str) or "{" not in value:
        return value

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in PLACEHOLDERS and name in context:
            return context[name]
        return match.group(0)

    return _PLACEHOLDER.sub(fill, value)


def apply_options(
    arguments: Mapping[str, Any], options: ArgumentOptions, context: Mapping[str, str]
) -> AppliedOptions:
    """Apply defaults and fixed values (agent side). Env keys are left to the service."""
    if not options:
        return AppliedOptions(dict(arguments))
    result = dict(arguments)
    envs = options.envs
    defaulted = []
    for key, value in options.defaults.items():
        # An explicit null counts as given; a stronger option owns the key anyway.
        if key not in result and key not in options.fixed and key not in envs:
            result[key] = render(value, context)
            defaulted.append(key)
    fixed = []
    for key, value in options.fixed.items():
        if key not in envs:
            result[key] = render(value, context)
            fixed.append(key)
    # The LLM cannot set an env-injected key either: the service's value wins, and
    # a value sent from here could be a guess at the secret. With the variable
    # unset the key is left out, not filled from a weaker option.
    for key in envs:
        result.pop(key, None)
    return AppliedOptions(result, tuple(defaulted), tuple(fixed), tuple(envs))


def parse_options(raw: Any) -> tuple[ArgumentOptions, list[tuple[str, str]]]:
    """Parse a descriptor's ``options``; returns the options and (field, problem) pairs."""
    problems: list[tuple[str, str]] = []
    if raw is None:
        return NO_OPTIONS, problems
    if not isinstance(raw, dict):
        return NO_OPTIONS, [("options", "must be an object with 'args' and/or 'envs'")]
    unknown = set(raw) - {"args", "envs"}
    if unknown:
        problems.append(
            ("options", f"unknown key(s) {sorted(unknown)}; options take 'args' and 'envs'")
        )
    args = raw.get("args", {})
    defaults: dict[str, Any] = {}
    fixed: dict[str, Any] = {}
    if not isinstance(args, dict):
        problems.append(("options.args", "must be an object with 'defaults' and/or 'fixed'"))
    else:
        unknown = set(args) - {"defaults", "fixed"}
        if unknown:
            problems.append(
                ("options.args", f"unknown key(s) {sorted(unknown)}; use 'defaults' and 'fixed'")
            )
        for name, target in (("defaults", defaults), ("fixed", fixed)):
            value = args.get(name, {})
            if not isinstance(value, dict):
                problems.append((f"options.args.{name}", "must be an object of argument values"))
            else:
                target.update(value)
    envs_raw = raw.get("envs", {})
    envs: dict[str, str] = {}
    if not isinstance(envs_raw, dict):
        problems.append(("options.envs", "must map argument names to environment variable names"))
    else:
        for key, name in envs_raw.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                problems.append(
                    (f"options.envs.{key}", f"{name!r} is not an environment variable name")
                )
            else:
                envs[key] = name
    return ArgumentOptions(defaults, fixed, envs), problems
