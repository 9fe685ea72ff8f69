"""``toolbus policy check`` and ``toolbus policy schema``: the call policy, before a door starts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolbus.cli.plugin_api import CommandLine, fail
from toolbus.plugins import hookimpl

if TYPE_CHECKING:
    from toolbus.domain.config.registry import Registry
    from toolbus_cedar.engine import CedarEngine
    from toolbus_cedar.schema import CallSchema

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Tool configuration (snapshot file or directory); default TOOLBUS_CONFIG, then "
        "config in toolbus.toml.",
    ),
]


def _load(config: Path | None) -> tuple[CedarEngine, Registry, CallSchema]:
    """The engine on the files ``[policy]`` names, the configuration, and its schema."""
    from toolbus.application.doors.settings import parse_policy_settings
    from toolbus.domain.errors import ConfigError, PluginError
    from toolbus.runtime import build_registry
    from toolbus.settings import load_settings
    from toolbus_cedar.engine import CedarEngine
    from toolbus_cedar.schema import call_schema

    try:
        settings = load_settings(config=config)
        registry = build_registry(settings)
        policy = parse_policy_settings(settings.file.get("policy"))
        if policy is None:
            fail("toolbus.toml has no [policy] table: there is no call policy to check")
        base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
        engine = CedarEngine([base / name for name in policy.files], policy.users, reload=False)
    except (ConfigError, PluginError) as exc:
        fail(str(exc))
    return engine, registry, call_schema(registry.tools.values(), policy.users)


def check(config: ConfigOption = None) -> None:
    """Check the policy files [policy] names against the configuration; exit 2 on a problem.

    Every problem names its file and line, and how to fix it.
    """
    from toolbus.domain.errors import ConfigError

    engine, registry, _ = _load(config)
    problems = engine.check(registry)
    if problems:
        fail(str(ConfigError(problems)))
    count = engine.policy_count
    typer.echo(
        f"ok: {count} polic{'y' if count == 1 else 'ies'}, checked against the configuration"
    )


def schema(config: ConfigOption = None) -> None:
    """Print the Cedar schema policies are checked against: what they can refer to."""
    _, _, made = _load(config)
    typer.echo(made.text)


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    group = cli.group("policy", help="The call policy (Cedar): check it, print its schema.")
    group.command("check", check)
    group.command("schema", schema)
