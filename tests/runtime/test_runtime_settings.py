"""Settings (flags > environment > toolbus.toml) and putting a process together."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from toolbus.application.calls.service import ToolService
from toolbus.domain.errors import ConfigError, PluginError
from toolbus.plugins import ToolPlugin, load_tool_plugins
from toolbus.runtime import _FIRST_PARTY_SERVICES, build_registry, merged_snapshot, resolve_service
from toolbus.settings import DEFAULT_BROKER, SETTINGS_FILE, Settings, load_settings
from toolbus_calculator import calculator_service
from toolbus_joke import joke_service
from toolbus_joke.service import JokeService

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean working directory and environment: no toolbus.toml, no TOOLBUS_* variables."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOOLBUS_BROKER", raising=False)
    monkeypatch.delenv("TOOLBUS_CONFIG", raising=False)
    return tmp_path


def write_toml(directory: Path, text: str) -> Path:
    path = directory / SETTINGS_FILE
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- precedence ---------------------------------------------------------------------


def test_defaults_without_flags_environment_or_file(here: Path) -> None:
    settings = load_settings()

    assert settings.broker == DEFAULT_BROKER == "memory://"
    assert settings.config is None
    assert dict(settings.broker_options) == {}


def test_the_file_is_read_from_the_working_directory(here: Path) -> None:
    write_toml(
        here,
        """
        broker = "nats://file:4222"
        config = "conf"

        [broker-options]
        name = "from-file"
        """,
    )

    settings = load_settings()

    assert settings.broker == "nats://file:4222"
    assert settings.config == here / "conf"
    assert dict(settings.broker_options) == {"name": "from-file"}
    assert settings.file["broker"] == "nats://file:4222"


def test_environment_beats_the_file(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(here, 'broker = "nats://file:4222"\nconfig = "conf"\n')
    monkeypatch.setenv("TOOLBUS_BROKER", "kafka://env:9092")
    monkeypatch.setenv("TOOLBUS_CONFIG", "/srv/env-config")

    settings = load_settings()

    assert settings.broker == "kafka://env:9092"
    assert settings.config == Path("/srv/env-config")


def test_flags_beat_the_environment_and_the_file(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(here, 'broker = "nats://file:4222"\nconfig = "conf"\n')
    monkeypatch.setenv("TOOLBUS_BROKER", "kafka://env:9092")
    monkeypatch.setenv("TOOLBUS_CONFIG", "/srv/env-config")

    settings = load_settings("pulsar://flag:6650", "flag-config.json")

    assert settings.broker == "pulsar://flag:6650"
    assert settings.config == Path("flag-config.json")


def test_each_setting_falls_back_on_its_own(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(here, 'broker = "nats://file:4222"\nconfig = "conf"\n')
    monkeypatch.setenv("TOOLBUS_CONFIG", "/srv/env-config")

    settings = load_settings(broker="pulsar://flag:6650")

    assert settings.broker == "pulsar://flag:6650"  # flag
    assert settings.config == Path("/srv/env-config")  # environment


def test_an_empty_environment_variable_counts_as_unset(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_toml(here, 'broker = "nats://file:4222"\n')
    monkeypatch.setenv("TOOLBUS_BROKER", "")
    monkeypatch.setenv("TOOLBUS_CONFIG", "")

    settings = load_settings()

    assert settings.broker == "nats://file:4222"
    assert settings.config is None


def test_a_relative_config_path_in_the_file_is_relative_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    write_toml(project, 'config = "config/tools"\n')
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("TOOLBUS_CONFIG", raising=False)

    settings = load_settings(cwd=project)

    assert settings.config == project / "config" / "tools"


def test_an_absolute_config_path_in_the_file_is_kept(here: Path, tmp_path: Path) -> None:
    target = tmp_path / "absolute" / "tools.json"
    write_toml(here, f"config = {json.dumps(str(target))}\n")

    assert load_settings().config == target


def test_explicit_cwd_and_environ_are_used_instead_of_the_process_ones(
    here: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    write_toml(other, 'broker = "nats://other:4222"\n')

    assert load_settings(cwd=other).broker == "nats://other:4222"
    env = {"TOOLBUS_BROKER": "kafka://given:9092"}
    assert load_settings(cwd=other, environ=env).broker == "kafka://given:9092"


def test_bad_toml_is_a_config_error_naming_the_file(here: Path) -> None:
    path = write_toml(here, "broker = \n")

    with pytest.raises(ConfigError) as caught:
        load_settings()

    assert str(path) in str(caught.value)
    assert "not valid TOML" in str(caught.value)


def test_bad_toml_is_reported_even_when_flags_give_everything(here: Path) -> None:
    # A broken settings file is a mistake worth hearing about, not something to skip.
    write_toml(here, "[[[")

    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings("memory://", "conf")


def test_broker_options_must_be_a_table(here: Path) -> None:
    write_toml(here, 'broker-options = "fast"\n')

    with pytest.raises(ConfigError, match="broker-options"):
        load_settings()


# --- building the registry ------------------------------------------------------------


def test_without_a_config_the_registry_is_the_installed_plugins_defaults() -> None:
    registry = build_registry(Settings())

    assert {"tell-joke", "calculate"} <= set(registry.tools)
    assert registry.service_for(registry.tool("calculate")).id == "calculator"


def test_a_configured_snapshot_replaces_the_plugin_defaults(tmp_path: Path) -> None:
    snapshot = {
        "tool-service": {"joke-service": joke_service.descriptor()},
        "tool": {
            "office-joke": {
                "type": "tool-service",
                "name": "office-joke",
                "description": "A dad joke for the office",
                "service": "joke-service",
                "style": "dad-joke",
                "arguments": [{"name": "topic", "type": "string", "description": "topic"}],
            }
        },
    }
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(snapshot), encoding="utf-8")

    registry = build_registry(Settings(config=path))

    assert set(registry.tools) == {"office-joke"}
    assert registry.tool("office-joke").config == {"style": "dad-joke"}


def test_a_missing_config_path_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_registry(Settings(config=tmp_path / "nowhere"))


def test_plugin_tool_types_are_accepted_in_configuration() -> None:
    defaults = load_tool_plugins()
    snapshot = merged_snapshot(
        [
            *(p.snapshot for p in defaults),
            {"tool": {"coo": {"type": "carrier-pigeon", "name": "coo", "description": "d"}}},
        ]
    )
    plugin = ToolPlugin(
        name="pigeon", distribution="x", snapshot=snapshot, tool_types=("carrier-pigeon",)
    )

    registry = build_registry(Settings(), [*defaults, plugin])

    assert registry.tool("coo").type == "carrier-pigeon"
    without_the_type = ToolPlugin(name="pigeon", distribution="x", snapshot=snapshot)
    with pytest.raises(ConfigError, match="carrier-pigeon"):
        build_registry(Settings(), [*defaults, without_the_type])


def test_merged_snapshot_merges_by_section_and_later_wins() -> None:
    first: dict[str, Any] = {"tool-service": {"a": {"v": 1}}, "tool": {"x": {"v": 1}}}
    second: dict[str, Any] = {"tool": {"x": {"v": 2}, "y": {"v": 3}}, "hooks": {"h": {}}}

    merged = merged_snapshot([first, second])

    assert merged == {
        "tool-service": {"a": {"v": 1}},
        "tool": {"x": {"v": 2}, "y": {"v": 3}},
        "hooks": {"h": {}},
    }
    assert first["tool"] == {"x": {"v": 1}}, "inputs are not modified"


# --- resolving services by name -------------------------------------------------------


def test_resolve_an_installed_service_by_id() -> None:
    assert resolve_service("joke-service") is joke_service
    assert resolve_service("calculator") is calculator_service


def test_resolve_by_import_path_to_an_instance() -> None:
    assert resolve_service("toolbus_joke.service:joke_service") is joke_service


def test_resolve_by_import_path_to_a_subclass_makes_an_instance() -> None:
    service = resolve_service("toolbus_joke.service:JokeService")

    assert type(service) is JokeService
    assert service.id == "joke-service"


def test_resolve_a_service_defined_in_a_module_of_ones_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "my_shop_tools.py"
    module.write_text(
        textwrap.dedent(
            """
            from toolbus import ToolService, tool_service

            @tool_service("greeter")
            async def greeter(name: str) -> str:
                return f"hello {name}"

            class Shouter(ToolService):
                id = "shouter"

                async def invoke(self, user, config, arguments):
                    return str(arguments.get("text", "")).upper()
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    greeter = resolve_service("my_shop_tools:greeter")
    shouter = resolve_service("my_shop_tools:Shouter")

    assert isinstance(greeter, ToolService)
    assert greeter.id == "greeter"
    assert greeter.request_queue == "non-persistent://tg/request/greeter"
    assert shouter.id == "shouter"


def test_resolve_by_id_uses_the_plugins_given() -> None:
    plugin = ToolPlugin(name="only", distribution="x", services=(calculator_service,))

    assert resolve_service("calculator", [plugin]) is calculator_service
    with pytest.raises(PluginError, match=r"the installed ones provide calculator\)"):
        resolve_service("joke-service", [plugin])


def test_an_unknown_service_id_lists_the_installed_ones() -> None:
    with pytest.raises(PluginError) as caught:
        resolve_service("weather-service")

    message = str(caught.value)
    ids = sorted(s.id for p in load_tool_plugins() for s in p.services)
    assert "'weather-service'" in message
    assert f"the installed ones provide {', '.join(ids)}" in message
    assert "import path" in message


def test_no_installed_services_at_all_says_so() -> None:
    with pytest.raises(PluginError, match=r"\(no tool plugin is installed\)"):
        resolve_service("weather-service", [])


@pytest.mark.parametrize("name", sorted(_FIRST_PARTY_SERVICES))
def test_an_example_service_not_installed_names_the_distribution_that_brings_it(
    name: str,
) -> None:
    with pytest.raises(PluginError) as caught:
        resolve_service(name, [])

    distribution = _FIRST_PARTY_SERVICES[name]
    message = str(caught.value)
    assert "none installed" not in message
    assert f"(no tool plugin is installed); {name!r} is the example service of" in message
    assert f"{distribution}, which the examples extra brings" in message
    assert "pip install --find-links DIR 'toolbus[examples]'," in message


def test_the_examples_extra_brings_every_example_service() -> None:
    extras = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    brought = {Requirement(entry).name for entry in extras["examples"]}

    assert brought == set(_FIRST_PARTY_SERVICES.values())


def test_the_example_services_named_are_those_their_plugins_provide() -> None:
    provided = {
        service.id: plugin.distribution
        for plugin in load_tool_plugins()
        for service in plugin.services
        if plugin.distribution in set(_FIRST_PARTY_SERVICES.values())
    }
    assert provided == _FIRST_PARTY_SERVICES


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("toolbus_no_such_module:service", "cannot import"),
        ("toolbus_joke.service:no_such_attribute", "cannot import"),
        ("toolbus_joke.service:tell_joke", "is a function, not a tool service"),
        ("toolbus_joke.service:STYLES", "is a tuple, not a tool service"),
        ("pathlib:Path", "not a tool service"),
    ],
)
def test_an_import_path_that_is_not_a_service_is_refused(name: str, fragment: str) -> None:
    with pytest.raises(PluginError, match=fragment) as caught:
        resolve_service(name)

    assert repr(name) in str(caught.value)
