"""``toolbus call``, ``toolbus plugins``, ``toolbus demo``, and the docs' command examples.

Commands run in-process through typer's CliRunner (``call`` hosts the installed
tool plugins on the in-memory bus itself), in a scratch working directory with
no ``TOOLBUS_*`` variables, so that nothing around the test decides settings.
Extra tool plugins are added the way real ones are: as entry points.
"""

from __future__ import annotations

import importlib.metadata as metadata
import inspect
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner, Result

import toolbus.cli
import toolbus.cli.call
import toolbus.plugins.discovery as discovery
import toolbus.plugins.installed as installation
from tests.cli.test_help_text import flat
from toolbus.cli import app
from toolbus.plugins import (
    ADAPTER_GROUP,
    COMMAND_GROUP,
    LLM_GROUP,
    PLUGIN_GROUP,
    POLICY_GROUP,
    STATE_GROUP,
    ToolRegistrar,
    hookimpl,
)
from toolbus.settings import SETTINGS_FILE
from toolbus.testing import ToolTestKit
from toolbus_joke.jokes import JOKES

ROOT = Path(__file__).parent.parent.parent
DOCS = ROOT / "docs"
ANSWER = re.compile(r"Hey (?P<user>.*)! Here's a (?P<style>\S+) for you:\n\n(?P<joke>.+)\n", re.S)

Invoke = Callable[..., Result]


@pytest.fixture(scope="module", autouse=True)
def commands_registered() -> None:
    # What ``toolbus.cli.main`` does before running the app.
    toolbus.cli.assemble()


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def toolbus_cli(scratch: Path) -> Invoke:
    def invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
        return CliRunner().invoke(app, list(args), env=env, input=input)

    return invoke


def joke_parts(output: str) -> dict[str, str]:
    match = ANSWER.fullmatch(output)
    assert match, f"not a joke answer: {output!r}"
    return match.groupdict()


# --- extra tool plugins, registered through entry points ---------------------------


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"the {name} test tool", **extra}


class _TestToolsPlugin:
    """Tools whose answers show what the service received, stream, or never come."""

    @staticmethod
    @hookimpl
    def toolbus_register_tools(register: ToolRegistrar) -> None:
        from toolbus import tool_service

        @tool_service("inspector", config_params=["mood"])
        async def inspector(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            return json.dumps(
                {"user": user, "config": config, "arguments": arguments}, sort_keys=True
            )

        @tool_service("ticker")
        async def ticker(count: int) -> Any:
            for n in range(count):
                yield f"tick{n} "

        @tool_service("hang")
        async def hang(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        @tool_service("asker")
        async def asker(path: str) -> str:
            from toolbus import Elicitation, RootsRequest, Sampling, ask

            form = {
                "type": "object",
                "properties": {
                    "sure": {"type": "boolean", "title": "Sure"},
                    "copies": {"type": "integer"},
                    "level": {"type": "string", "enum": ["low", "high"]},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                    "note": {"type": "string", "default": "none given"},
                },
                "required": ["sure", "copies", "level"],
            }
            answer = await ask(Elicitation(f"Delete {path}?", form))
            if not answer.accepted:
                return f"{path}: {answer.action}"
            poem = await ask(Sampling([f"A line about {path}"], system_prompt="Be short"))
            roots = await ask(RootsRequest())
            where = [root.uri.rsplit("/", 1)[-1] for root in roots.roots]
            return json.dumps(
                {"form": dict(answer.content), "poem": poem.text, "roots": where}, sort_keys=True
            )

        register.service(inspector, tools={"inspect": _tool("inspect", mood="calm")})
        register.service(asker, tools={"ask": _tool("ask")})
        register.service(ticker, tools={"tick": _tool("tick")})
        register.service(hang, tools={"hang": _tool("hang")})


@pytest.fixture
def test_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    real = installation.entry_points
    extra = metadata.EntryPoint("cli-test-tools", f"{__name__}:_TestToolsPlugin", PLUGIN_GROUP)

    def entry_points(group: str) -> Sequence[metadata.EntryPoint]:
        found = tuple(real(group))
        return (*found, extra) if group == PLUGIN_GROUP else found

    monkeypatch.setattr(installation, "entry_points", entry_points)


# --- toolbus call ------------------------------------------------------------------


def test_call_tell_joke_with_the_installed_plugins_defaults(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("call", "tell-joke", "--arg", "topic=llamas", "--user", "alice")

    assert result.exit_code == 0, result.output
    parts = joke_parts(result.stdout)
    assert parts["user"] == "alice"
    joke_plugin = {p.name: p for p in discovery.load_tool_plugins()}["joke"]
    assert parts["style"] == joke_plugin.snapshot["tool"]["tell-joke"]["style"]
    assert parts["joke"] in JOKES["llama"][parts["style"]]


@pytest.mark.usefixtures("test_tools")
def test_call_answers_what_a_tool_asks_at_the_terminal(toolbus_cli: Invoke, scratch: Path) -> None:
    (scratch / "work").mkdir()
    typed = "\n".join(["accept", "y", "3", "high", "a, b", "", "roses are red"]) + "\n"
    args = ("call", "ask", "--arg", "path=a.txt", "--ask", "--root", "work")
    result = toolbus_cli(*args, input=typed)
    declined = toolbus_cli(*args, input="decline\n")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "form": {
            "copies": 3,
            "level": "high",
            "note": "none given",
            "sure": True,
            "tags": ["a", "b"],
        },
        "poem": "roses are red",
        "roots": ["work"],
    }
    assert "The tool asks: Delete a.txt?" in result.stderr
    assert "(system) Be short" in result.stderr and "(user) A line about a.txt" in result.stderr
    assert declined.stdout == "a.txt: decline\n"


@pytest.mark.usefixtures("test_tools")
def test_call_without_a_terminal_says_the_tool_asks(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("call", "ask", "--arg", "path=a.txt")

    assert result.exit_code == 1
    assert 'input-unavailable: this tool asks its caller for elicitation "Delete a.txt?"' in (
        result.stderr
    )
    assert "(toolbus call answers at a terminal, or with --ask)" in result.stderr


def test_call_calculate(toolbus_cli: Invoke, caplog: pytest.LogCaptureFixture) -> None:
    result = toolbus_cli("call", "calculate", "--arg", "expression=2 * (3 + 4)")

    assert result.exit_code == 0, result.output
    assert result.stdout == "14\n"
    # The in-process services stop without a drain, as asked: nothing to warn about.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.usefixtures("test_tools")
def test_arg_values_are_json_when_they_parse_and_text_otherwise(toolbus_cli: Invoke) -> None:
    result = toolbus_cli(
        "call",
        "inspect",
        "--arg",
        "count=3",
        "--arg",
        "ratio=0.5",
        "--arg",
        "flag=true",
        "--arg",
        "nothing=null",
        "--arg",
        "tags=[1, 2]",
        "--arg",
        'quoted="3"',
        "--arg",
        "word=hello",
        "--arg",
        "sentence=hello world",
        "--arg",
        "equation=a=b",
        "--arg",
        "empty=",
        "--user",
        "ursula",
    )

    assert result.exit_code == 0, result.output
    seen = json.loads(result.stdout)
    assert seen["arguments"] == {
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "nothing": None,
        "tags": [1, 2],
        "quoted": "3",
        "word": "hello",
        "sentence": "hello world",
        "equation": "a=b",
        "empty": "",
    }
    assert seen["user"] == "ursula"
    assert seen["config"] == {"mood": "calm"}, "config values come from the tool descriptor"


@pytest.mark.usefixtures("test_tools")
def test_json_gives_all_arguments_and_arg_overrides_it(toolbus_cli: Invoke) -> None:
    result = toolbus_cli(
        "call", "inspect", "--json", '{"a": 1, "b": {"c": [true]}}', "--arg", "a=2"
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["arguments"] == {"a": 2, "b": {"c": [True]}}


def test_a_string_argument_keeps_text_that_looks_like_json(toolbus_cli: Invoke) -> None:
    # ``expression`` is declared "type": "string": "42" must reach it as text.
    result = toolbus_cli("call", "calculate", "--arg", "expression=42")

    assert result.exit_code == 0, result.output
    assert result.stdout == "42\n"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--json", "{not json"], "--json is not valid JSON"),
        (["--json", "[1, 2]"], "--json must be a JSON object"),
        (["--arg", "no-equals-sign"], "must look like name=value"),
        (["--arg", "=value"], "must look like name=value"),
    ],
)
def test_malformed_arguments_exit_2(toolbus_cli: Invoke, args: list[str], fragment: str) -> None:
    result = toolbus_cli("call", "calculate", *args)

    assert result.exit_code == 2
    assert fragment in result.stderr
    assert result.stdout == ""


@pytest.mark.usefixtures("test_tools")
def test_stream_prints_the_chunks_and_without_it_the_whole_answer(toolbus_cli: Invoke) -> None:
    streamed = toolbus_cli("call", "tick", "--arg", "count=3", "--stream")
    whole = toolbus_cli("call", "tick", "--arg", "count=3")

    assert streamed.exit_code == 0, streamed.output
    assert whole.exit_code == 0, whole.output
    assert streamed.stdout == "tick0 tick1 tick2 \n"
    assert whole.stdout == "tick0 tick1 tick2 \n"


def test_a_tool_error_exits_1_with_its_type_and_message(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("call", "calculate", "--arg", "expression=1 / 0")

    assert result.exit_code == 1
    assert result.stderr == "error: bad-request: division by zero\n"
    assert result.stdout == ""


def test_an_unknown_tool_exits_2_and_suggests_a_name(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("call", "tell-jokes")

    assert result.exit_code == 2
    assert "no tool named 'tell-jokes'" in result.stderr
    assert "'tell-joke'" in result.stderr


@pytest.mark.usefixtures("test_tools")
def test_a_timeout_exits_1_naming_the_service_and_the_limit_and_returns_promptly(
    toolbus_cli: Invoke,
) -> None:
    start = time.monotonic()
    result = toolbus_cli("call", "hang", "--timeout", "0.2")
    elapsed = time.monotonic() - start

    assert result.exit_code == 1
    assert "deadline-exceeded" in result.stderr
    assert "'hang'" in result.stderr
    assert "0.2 s" in result.stderr
    # The call was given up: nothing kept the command waiting for it, not even as long
    # as the default limit (the longest wait the command has of its own).
    default = inspect.signature(toolbus.cli.call.call).parameters["timeout"].default
    assert elapsed < default, f"call took {elapsed:.1f} s to exit after a 0.2 s timeout"


def test_a_tool_no_one_serves_on_memory_exits_2_at_once(toolbus_cli: Invoke, scratch: Path) -> None:
    # The README's weather tool, called with no service in this process: on the
    # in-memory bus it is known at once that no answer can come.
    snapshot = {
        "tool-service": {
            "weather": {
                "id": "weather",
                "request-queue": "non-persistent://tg/request/weather",
                "response-queue": "non-persistent://tg/response/weather",
            }
        },
        "tool": {"weather-eu": _tool("weather-eu", type="tool-service", service="weather")},
    }
    (scratch / "config.json").write_text(json.dumps(snapshot))

    result = toolbus_cli("call", "weather-eu", "--config", "config.json", "-a", "city=Paris")

    assert result.exit_code == 2, result.output
    assert "no service serves 'weather-eu'" in result.stderr
    assert "non-persistent://tg/request/weather" in result.stderr
    assert "--broker" in result.stderr


@pytest.mark.usefixtures("wide_help")
def test_call_says_that_it_does_not_apply_permissions(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("call", "--help")

    assert "permissions are not applied" in flat(result.output)


def test_a_user_outside_the_permissions_is_still_called_for(
    toolbus_cli: Invoke, scratch: Path
) -> None:
    # Documented behaviour: whoever runs the command could publish the request anyway.
    root = write_joke_config(scratch / "cfg", "pun")
    (root / "permissions.json").write_text(json.dumps({"users": {"alice": ["default"]}}))

    result = toolbus_cli("call", "office-joke", "--config", str(root), "--user", "bob")

    assert result.exit_code == 0, result.output
    assert joke_parts(result.stdout)["user"] == "bob"


def test_an_unknown_broker_scheme_exits_2_naming_the_adapters(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("call", "calculate", "-a", "expression=1", "--broker", "pigeon://coop")

    assert result.exit_code == 2
    assert "no broker adapter for pigeon://" in result.stderr
    for name in (ep.name for ep in metadata.entry_points(group=ADAPTER_GROUP)):
        assert name in result.stderr


@pytest.mark.parametrize(
    ("url", "toml", "fragment"),
    [
        ("memory://?buffer_size=abc", "", "field 'buffer_size': input should be a valid integer"),
        ("memory://?bufer_size=1", "", "field 'bufer_size': is not an option here"),
        ("nats://127.0.0.1:1?bogus=1", "", "'bogus': is not a NATS option"),
        (
            "kafka://127.0.0.1:1",
            '[broker-options]\nacks = "some"\n',
            "field 'acks': must be all, 1 or 0",
        ),
        (None, 'broker = "nats://127.0.0.1:1"\n[broker-options]\nbogus = 1\n', "'bogus'"),
    ],
    ids=["memory-value", "memory-name", "nats-url", "kafka-toml", "nats-toml"],
)
def test_bad_broker_options_exit_2_naming_the_option(
    toolbus_cli: Invoke, scratch: Path, url: str | None, toml: str, fragment: str
) -> None:
    (scratch / SETTINGS_FILE).write_text(toml)
    broker = ["--broker", url] if url else []

    result = toolbus_cli("call", "calculate", "-a", "expression=1", *broker)

    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
    assert "Traceback" not in result.output


def test_a_negative_drain_timeout_exits_2(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("serve", "calculator", "--drain-timeout", "-1")

    assert result.exit_code == 2
    assert "--drain-timeout" in result.output


def write_joke_config(root: Path, style: str) -> Path:
    """A configuration directory with one tool, ``office-joke``, on the joke service."""
    (root / "tool-service").mkdir(parents=True)
    (root / "tool").mkdir()
    (root / "tool-service" / "joke-service.json").write_text(
        json.dumps(
            {
                "id": "joke-service",
                "request-queue": "non-persistent://tg/request/joke",
                "response-queue": "non-persistent://tg/response/joke",
                "config-params": [{"name": "style", "required": False}],
            }
        )
    )
    (root / "tool" / "office-joke.json").write_text(
        json.dumps(
            {
                "type": "tool-service",
                "name": "office-joke",
                "description": "A joke for the office",
                "service": "joke-service",
                "style": style,
                "arguments": [{"name": "topic", "type": "string", "description": "topic"}],
            }
        )
    )
    return root


def test_call_with_a_config_directory(toolbus_cli: Invoke, scratch: Path) -> None:
    config = write_joke_config(scratch / "conf", "dad-joke")

    result = toolbus_cli("call", "office-joke", "--config", str(config), "-a", "topic=my dog")
    not_configured = toolbus_cli("call", "tell-joke", "--config", str(config))

    assert result.exit_code == 0, result.output
    parts = joke_parts(result.stdout)
    assert parts["style"] == "dad-joke"
    assert parts["joke"] in JOKES["animals"]["dad-joke"]
    assert not_configured.exit_code == 2
    assert "no tool named 'tell-joke'" in not_configured.stderr


def test_call_takes_the_config_from_the_environment(toolbus_cli: Invoke, scratch: Path) -> None:
    config = write_joke_config(scratch / "conf", "one-liner")

    result = toolbus_cli(
        "call", "office-joke", "-a", "topic=food", env={"TOOLBUS_CONFIG": str(config)}
    )

    assert result.exit_code == 0, result.output
    assert joke_parts(result.stdout)["style"] == "one-liner"


def test_call_takes_the_config_from_toolbus_toml(toolbus_cli: Invoke, scratch: Path) -> None:
    write_joke_config(scratch / "conf", "pun")
    write_joke_config(scratch / "other", "one-liner")
    (scratch / SETTINGS_FILE).write_text('config = "conf"\n')

    from_file = toolbus_cli("call", "office-joke", "-a", "topic=llamas")
    from_env = toolbus_cli(
        "call", "office-joke", "-a", "topic=llamas", env={"TOOLBUS_CONFIG": "other"}
    )

    assert from_file.exit_code == 0, from_file.output
    assert joke_parts(from_file.stdout)["style"] == "pun"
    assert from_env.exit_code == 0, from_env.output
    assert joke_parts(from_env.stdout)["style"] == "one-liner"


@pytest.mark.parametrize(
    ("setup", "args", "fragment"),
    [
        ("", ["--config", "no-such-config"], "does not exist"),
        (f"{SETTINGS_FILE}=broker = ", [], "not valid TOML"),
        ("bad.json={", ["--config", "bad.json"], "bad.json"),
    ],
)
def test_a_bad_configuration_exits_2_with_a_readable_error(
    toolbus_cli: Invoke, scratch: Path, setup: str, args: list[str], fragment: str
) -> None:
    if setup:
        name, _, text = setup.partition("=")
        (scratch / name).write_text(text)

    result = toolbus_cli("call", "calculate", "-a", "expression=1", *args)

    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
    assert "Traceback" not in result.output


# --- toolbus plugins ---------------------------------------------------------------


def installed() -> list[tuple[str, str, str, str]]:
    """(kind, name, distribution, version) for every installed plugin, from metadata."""
    rows = []
    groups = (
        ("adapter", ADAPTER_GROUP),
        ("llm", LLM_GROUP),
        ("state", STATE_GROUP),
        ("policy", POLICY_GROUP),
        ("tools", PLUGIN_GROUP),
        ("commands", COMMAND_GROUP),
    )
    for kind, group in groups:
        for ep in metadata.entry_points(group=group):
            assert ep.dist is not None
            name = ep.dist.metadata["Name"]
            rows.append((kind, ep.name, name, metadata.version(name)))
    return rows


def test_plugins_lists_adapters_and_tool_plugins_with_versions(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("plugins")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Broker adapters:"
    titles = {
        "adapter": "Broker adapters:",
        "llm": "LLM adapters:",
        "state": "State stores:",
        "policy": "Policy engines:",
        "tools": "Tool plugins:",
        "commands": "Commands:",
    }
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines:
        if not line.startswith(" "):
            current = sections.setdefault(line, [])
        else:
            current.append(line)
    for kind, name, distribution, version in installed():
        section = sections[titles[kind]]
        assert any(line.split() == [name, distribution, version] for line in section), (
            name,
            lines,
        )
    names = {name for _, name, _, _ in installed()}
    assert {"memory", "nats", "pulsar", "kafka", "joke", "calculator"} <= names
    assert {"openai", "anthropic", "scripted"} <= names
    assert [line.split()[0] for line in sections["State stores:"]] == [
        "memory",
        "nats",
        "redis",
        "rediss",
    ]


def test_plugins_json(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("plugins", "--json")

    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert sorted(
        (p["kind"], p["name"], p["distribution"], p["version"]) for p in listed
    ) == sorted(installed())


# --- toolbus demo ------------------------------------------------------------------


def test_demo_exits_0_showing_a_state_transition_and_a_refusal(toolbus_cli: Invoke) -> None:
    from toolbus.cli.demo import DEMO_CONFIG

    result = toolbus_cli("demo")

    assert result.exit_code == 0, result.output
    output = result.stdout
    transitions = {t["name"]: t["state"] for t in DEMO_CONFIG["tool"].values() if t.get("state")}
    assert transitions, "the demo configuration has a tool that changes state"
    offers = dict(re.findall(r"^\s*\[(\S+)\] offered: (.*)$", output, re.M))
    assert "undefined" in offers
    for tool, state in transitions.items():
        assert state in offers, f"no offer shown after {tool} moved to {state}"
        assert offers[state] != offers["undefined"]
    assert re.search(r"refused: user '\w+' may not use group", output)
    assert "calculate(6 * 7) -> 42" in output
    assert "Traceback" not in result.output


# --- a real process ----------------------------------------------------------------


def test_main_registers_every_command(
    scratch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["toolbus", "--help"])

    with pytest.raises(SystemExit) as exited:
        toolbus.cli.main()

    assert exited.value.code == 0
    listed = capsys.readouterr().out
    for name in ("tools", "serve", "call", "plugins", "demo"):
        assert re.search(rf"\b{name}\b", listed), name


def test_the_console_script_calls_a_tool(scratch: Path) -> None:
    script = Path(sys.executable).parent / "toolbus"
    command = [str(script)] if script.exists() else ["toolbus"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}

    child = subprocess.run(
        [*command, "call", "calculate", "--arg", "expression=6 * 7"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )

    assert child.returncode == 0, child.stderr
    assert child.stdout == "42\n"


def test_version_names_the_core_and_each_installed_plugin(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("--version")

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"toolbus {metadata.version('toolbus')}"
    assert f"toolbus-joke {metadata.version('toolbus-joke')}" in lines
    assert f"toolbus-nats {metadata.version('toolbus-nats')}" in lines


def test_python_dash_m_toolbus_runs_the_command_line(scratch: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}

    child = subprocess.run(
        [sys.executable, "-m", "toolbus", "call", "calculate", "--arg", "expression=6 * 7"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )

    assert child.returncode == 0, child.stderr
    assert child.stdout == "42\n"


# --- the documentation's examples run as written ------------------------------------

DOC_PAGES = ["cli.md", "plugins.md", "examples/joke-and-calculator.md"]
CONSOLE_BLOCK = re.compile(r"```console\n(.*?)```", re.S)
HEREDOC = re.compile(r"cat > (\S+) <<'EOF'$")
EXIT_ECHO = '; echo "exit $?"'


def console_sessions(page: str) -> list[list[str]]:
    return [block.splitlines() for block in CONSOLE_BLOCK.findall((DOCS / page).read_text())]


def run_shell_line(command: str, lines: list[str], here: Path) -> tuple[list[str], Path]:
    """Run one documented command; returns its output lines and the new directory.

    Only what the docs use is understood: ``mkdir -p``, ``cd``, ``cat > FILE <<'EOF'``
    and ``[VAR=value ...] uv run toolbus ...`` (optionally ``; echo "exit $?"``).
    """
    output: list[str] = []
    for part in command.split(" && "):
        heredoc = HEREDOC.fullmatch(part)
        words = shlex.split(part.removesuffix(EXIT_ECHO))
        if heredoc:
            end = lines.index("EOF")
            (here / heredoc[1]).write_text("\n".join(lines[:end]) + "\n")
            del lines[: end + 1]
        elif words[:2] == ["mkdir", "-p"]:
            for directory in words[2:]:
                (here / directory).mkdir(parents=True, exist_ok=True)
        elif words[0] == "cd":
            here = here / words[1]
            os.chdir(here)
        else:
            env = {}
            while "=" in words[0]:
                name, _, value = words.pop(0).partition("=")
                env[name] = value
            assert words[:3] == ["uv", "run", "toolbus"], f"unsupported example: {part!r}"
            assert "serve" not in words, "serve blocks: show it in a bash block instead"
            result = CliRunner().invoke(app, words[3:], env=env)
            output = result.output.splitlines()
            if part.endswith(EXIT_ECHO):
                output.append(f"exit {result.exit_code}")
            else:
                assert result.exit_code == 0, f"{part}\n{result.output}"
    return output, here


@pytest.mark.parametrize("page", DOC_PAGES)
def test_the_documented_commands_print_what_the_docs_show(scratch: Path, page: str) -> None:
    here = scratch
    ran = 0
    for session in console_sessions(page):
        lines = list(session)
        while lines:
            line = lines.pop(0)
            assert line.startswith("$ "), f"{page}: output with no command before it: {line!r}"
            expected = []
            actual, here = run_shell_line(line[2:], lines, here)
            while lines and not lines[0].startswith("$ "):
                expected.append(lines.pop(0))
            ran += 1
            # Every documented line appears, in order; "..." stands for lines left out.
            remaining = iter(a.rstrip() for a in actual)
            for wanted in (e.rstrip() for e in expected if e.strip() and e.strip() != "..."):
                assert any(wanted == got for got in remaining), (
                    f"{page}: `{line}` did not print {wanted!r}; it printed:\n" + "\n".join(actual)
                )
    assert ran, f"{page} has no console examples"


@pytest.mark.anyio
async def test_the_documented_plugin_test_passes(toolbus: ToolTestKit) -> None:
    page = (DOCS / "examples" / "joke-and-calculator.md").read_text()
    code = page.split("## Testing them", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "joke-and-calculator.md", "exec"), namespace)

    # What pytest would do with that file: hand the test the ``toolbus`` fixture.
    await namespace["test_jokes_and_sums"](toolbus)
