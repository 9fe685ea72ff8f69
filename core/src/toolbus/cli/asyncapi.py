"""``toolbus asyncapi``: the AsyncAPI 3.0 document of a deployment, as YAML or JSON."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from toolbus.application.calls.advertising import toolbus_version
from toolbus.application.live.config_files import load_registry_from_path
from toolbus.cli._app import app
from toolbus.cli._common import ConfigOption, config_path
from toolbus.cli._live import DEFAULT_WAIT, WaitOption, live_registry
from toolbus.cli.plugin_api import VerboseOption, fail, setup_logging
from toolbus.domain.asyncapi.document import asyncapi_document
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, PluginError
from toolbus.plugins import asyncapi_broker
from toolbus.settings import load_settings


class DocumentFormat(enum.StrEnum):
    """How ``toolbus asyncapi`` writes the document."""

    json = "json"
    yaml = "yaml"


@app.command("asyncapi")
def asyncapi_command(
    config: ConfigOption = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Describe what the broker knows: the config service's configuration and "
            "the services announcing themselves (instead of --config).",
        ),
    ] = False,
    output: Annotated[
        DocumentFormat, typer.Option("--format", "-f", help="json, or yaml (needs PyYAML).")
    ] = DocumentFormat.json,
    broker: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Broker the document describes (and --live reads); default from "
            "TOOLBUS_BROKER or toolbus.toml.",
        ),
    ] = None,
    title: Annotated[
        str, typer.Option(metavar="TEXT", help="The document's title.")
    ] = "toolbus deployment",
    out: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write to this file instead of standard output."),
    ] = None,
    wait: WaitOption = DEFAULT_WAIT,
    verbose: VerboseOption = False,
) -> None:
    """Write the AsyncAPI 3.0 document of a deployment's tool services.

    One channel per request and response queue, one operation per tool, the
    request and response messages with each tool's argument schema, and the
    broker as the server, with its bindings. With no broker named, the
    document has no server.
    """
    setup_logging(verbose)
    if live and config is not None:
        fail("--live reads the configuration from the broker: drop --config, or drop --live")
    try:
        settings = load_settings(broker, config)
    except ConfigError as exc:
        fail(str(exc))
    if live and (not settings.broker_named or settings.broker.startswith("memory:")):
        fail(
            "--live describes what a broker knows: name the broker with --broker URL (or "
            "TOOLBUS_BROKER, or broker in toolbus.toml); memory:// is each process's own, "
            "so nothing announces on it from outside"
        )
    registry: Registry
    if live:
        # What the broker knows only: the tools of plugins installed here are not served
        # anywhere until a service announces them.
        registry = live_registry(settings, wait, local_layer=False)
    else:
        path = config_path(config)
        try:
            registry = load_registry_from_path(path)
        except ConfigError as exc:
            fail(f"{path}: {exc}")
    described = None
    if settings.broker_named:
        try:
            described = asyncapi_broker(settings.broker, settings.broker_options)
        except (ConfigError, PluginError) as exc:
            fail(str(exc))
    else:
        typer.echo(
            "no broker named (--broker URL, TOOLBUS_BROKER or broker in toolbus.toml): "
            "the document has no server, and no broker's addresses or bindings",
            err=True,
        )
    document = asyncapi_document(registry, described, title=title, version=toolbus_version())
    text = render(document, output)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")


def render(document: dict[str, Any], output: DocumentFormat) -> str:
    """The document as text: indented JSON, or block-style YAML in the document's key order."""
    if output is DocumentFormat.json:
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    try:
        import yaml
    except ImportError:
        fail(
            "YAML output needs PyYAML; install it with: pip install 'toolbus[yaml]' "
            "(or use --format json)"
        )
    text: str = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    return text
