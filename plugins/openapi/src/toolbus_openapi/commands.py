"""``toolbus serve openapi``: an HTTP API's operations as tools on the bus.

Registered through the ``toolbus.commands`` entry point. Heavy imports wait
inside the command, so that ``toolbus --help`` stays quick.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolbus.cli.plugin_api import (
    BrokerOption,
    CommandLine,
    EventLoop,
    LoopOption,
    ServeOptions,
    VerboseOption,
    fail,
    serve_until_signalled,
    setup_logging,
)
from toolbus.plugins import hookimpl

if TYPE_CHECKING:
    from toolbus.domain.errors import Problem
    from toolbus_openapi.toolset import ToolsetSettings


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.serve_command("openapi", serve_openapi)


def serve_openapi(
    toolset: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="The toolset's name: its tools are named NAME_operationId and its service "
            "NAME. Without --spec, the \\[openapi.toolsets.NAME] table of toolbus.toml; "
            "without --toolset, every toolset that file declares.",
            show_default=False,
        ),
    ] = None,
    spec: Annotated[
        str | None,
        typer.Option(
            metavar="FILE_OR_URL",
            help="The OpenAPI 3.0/3.1 document: a file or an https URL (JSON or YAML).",
        ),
    ] = None,
    allow_insecure_spec: Annotated[
        bool,
        typer.Option(
            "--allow-insecure-spec",
            help="Also read a --spec URL over plain http (anyone on the way could change it).",
        ),
    ] = False,
    base_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Where requests go; default: the document's first server URL (required "
            "with credentials or --env-param).",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="HOST",
            help="Another host (NAME or NAME:PORT) redirects may lead to; repeatable.",
        ),
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ID_OR_TAG", help="Serve only these operationIds or tags; repeatable."
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(metavar="ID_OR_TAG", help="Leave out these operationIds or tags; repeatable."),
    ] = None,
    bearer_env: Annotated[
        str | None,
        typer.Option(
            metavar="VAR", help="Send 'Authorization: Bearer $VAR' with this variable's value."
        ),
    ] = None,
    header_env: Annotated[
        list[str] | None,
        typer.Option(
            metavar="HEADER=VAR",
            help="HEADER=VAR: send header HEADER with $VAR's value; repeatable.",
        ),
    ] = None,
    query_env: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PARAM=VAR",
            help="PARAM=VAR: send query parameter PARAM with $VAR's value; repeatable.",
        ),
    ] = None,
    env_param: Annotated[
        list[str] | None,
        typer.Option(
            metavar="VAR",
            help="A variable tools may inject as an argument (options.envs); repeatable.",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Seconds a whole call may take (a caller's earlier deadline ends it "
            "sooner). \\[default: 30]",
        ),
    ] = None,
    max_response_bytes: Annotated[
        int | None,
        typer.Option(min=1, help="Bytes of an answer kept; more is cut. \\[default: 65536]"),
    ] = None,
    list_tools: Annotated[
        bool, typer.Option("--list-tools", help="Print the tools and skipped operations; exit.")
    ] = False,
    broker: BrokerOption = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Calls each toolset runs at once.")] = 64,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds calls in flight may take to finish on shutdown.")
    ] = 30.0,
    announce: Annotated[
        bool | None,
        typer.Option(
            "--announce/--no-announce",
            help="Announce the tools so agents can call them with no configuration. "
            "Default: on (\\[announcements] enabled in toolbus.toml).",
            show_default=False,
        ),
    ] = None,
    announce_interval: Annotated[
        float | None,
        typer.Option(min=0.1, help="Seconds between announcements. \\[default: 10]"),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Expose Prometheus metrics on http://ADDR:PORT/metrics.")
    ] = None,
    metrics_addr: Annotated[str, typer.Option(help="Address for --metrics-port.")] = "127.0.0.1",
    verify_key: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SOURCE",
            help="Accept only calls signed by one of these public keys (a JWK, JWK Set or "
            "PEM file, or env:VARIABLE; repeatable). Needs toolbus\\[signing].",
            show_default=False,
        ),
    ] = None,
    allow_unsigned: Annotated[
        bool, typer.Option(help="With --verify-key: also serve unsigned calls, unverified.")
    ] = False,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    """Serve an HTTP API's operations, from its OpenAPI document, as tools."""
    from dataclasses import replace

    from toolbus.application.identity import CallVerifier, SigningKeyError
    from toolbus.domain.errors import ConfigError, Problem
    from toolbus.domain.live.settings import read_live_settings
    from toolbus.settings import SETTINGS_FILE, load_settings
    from toolbus_openapi.credentials import Credential
    from toolbus_openapi.toolset import (
        ToolsetSettings,
        credentials_from,
        open_toolset,
        toolsets_from_file,
    )

    setup_logging(verbose)
    if allow_unsigned and not verify_key:
        fail("--allow-unsigned relaxes --verify-key: give the keys to verify with too")
    try:
        verifier = (
            CallVerifier.load(verify_key, required=not allow_unsigned) if verify_key else None
        )
    except SigningKeyError as exc:
        fail(str(exc))
    problems: list[Problem] = []
    try:
        settings = load_settings(broker)
        live = read_live_settings(
            settings.file, base=Path.cwd(), environ=os.environ, where=SETTINGS_FILE
        )
        declared = toolsets_from_file(settings.file, Path.cwd(), where=SETTINGS_FILE)
    except ConfigError as exc:
        fail(str(exc))

    credentials: list[Credential] = []
    credentials.extend(credentials_from(bearer_env, "bearer", "--bearer-env", problems))
    for kind, pairs in (("header", header_env or []), ("query", query_env or [])):
        for pair in pairs:
            name, sep, variable = pair.partition("=")
            if not sep or not name:
                problems.append(Problem(f"--{kind}-env {pair!r}", "", "must be NAME=VARIABLE"))
                continue
            credentials.extend(
                credentials_from(variable, kind, f"--{kind}-env", problems, name=name)
            )

    chosen: list[ToolsetSettings] = []
    if spec is not None:
        if not toolset or len(toolset) != 1:
            fail("--spec serves one toolset: give exactly one --toolset NAME with it")
        chosen.append(ToolsetSettings(name=toolset[0], spec=spec))
    else:
        for name in toolset or sorted(declared):
            if name not in declared:
                problems.append(
                    Problem(
                        f"--toolset {name!r}",
                        "",
                        f"has no --spec and no [openapi.toolsets.{name}] table in "
                        f"{SETTINGS_FILE}; give --spec FILE_OR_URL",
                    )
                )
            else:
                chosen.append(declared[name])
        if not toolset and not declared:
            fail(
                f"no toolset to serve: give --toolset NAME --spec FILE_OR_URL, or declare "
                f"[openapi.toolsets.NAME] tables in {SETTINGS_FILE}"
            )
    if problems:
        fail(str(ConfigError(problems)))

    services = []
    for given in chosen:
        # Flags win over toolbus.toml, each on its own.
        limits = given.limits
        if timeout is not None:
            limits = replace(limits, timeout=timeout)
        if max_response_bytes is not None:
            limits = replace(limits, max_response_bytes=max_response_bytes)
        merged = replace(
            given,
            base_url=base_url or given.base_url,
            allow_hosts=(*given.allow_hosts, *(allow_host or ())),
            include=tuple(include) if include else given.include,
            exclude=tuple(exclude) if exclude else given.exclude,
            credentials=tuple(credentials) or given.credentials,
            env_params=(*given.env_params, *(env_param or ())),
            limits=limits,
            allow_insecure_spec=allow_insecure_spec or given.allow_insecure_spec,
        )
        try:
            services.append(open_toolset(merged))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        fail(str(ConfigError(problems)))

    if list_tools:
        for service in services:
            typer.echo(f"{service.id} -> {service.executor.base_url}")
            for operation in service.catalog.operations:
                typer.echo(f"  {operation.tool}: {operation.method} {operation.path}")
            for skipped in service.catalog.skipped:
                typer.echo(f"  skipped {skipped}")
        return

    tools = {
        key: {**tool, "service": service.id}
        for service in services
        for key, tool in service.tools().items()
    }

    async def close_clients() -> None:
        for service in services:
            await service.executor.aclose()

    serve_until_signalled(
        settings,
        services,
        ServeOptions(
            concurrency=concurrency,
            drain_timeout=drain_timeout,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            announce=live.announce if announce is None else announce,
            announce_interval=(
                live.announce_interval if announce_interval is None else announce_interval
            ),
            defaults={"tool": tools},
            verifier=verifier,
            cleanup=close_clients,
            loop=loop,
        ),
    )
