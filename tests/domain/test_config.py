"""The configuration model: descriptors, snapshot reading and validation (docs/configuration.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from toolbus.application.live.config_files import load_registry_from_path, read_snapshot
from toolbus.domain.config.descriptors import (
    BUILTIN_TOOL_TYPES,
    ConfigParam,
    ToolArgument,
    ToolDescriptor,
)
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, Problem

ROOT = Path(__file__).parent.parent.parent
DATA = ROOT / "tests" / "data"


def service(**fields: Any) -> dict[str, Any]:
    """A valid tool-service descriptor, with ``fields`` replaced (``None`` removes one)."""
    base: dict[str, Any] = {
        "id": "joke-service",
        "request-queue": "non-persistent://tg/request/joke",
        "response-queue": "non-persistent://tg/response/joke",
        "config-params": [{"name": "style", "required": False}],
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def tool(**fields: Any) -> dict[str, Any]:
    """A valid tool-service tool descriptor, with ``fields`` replaced (``None`` removes one)."""
    base: dict[str, Any] = {
        "type": "tool-service",
        "name": "tell-joke",
        "description": "Tell a joke on a given topic",
        "service": "joke-service",
        "arguments": [{"name": "topic", "type": "string", "description": "The topic"}],
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def snapshot(
    tools: dict[str, Any] | None = None, services: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "tool-service": {"joke-service": service()} if services is None else services,
        "tool": {"tell-joke": tool()} if tools is None else tools,
    }


def load_tool(**fields: Any) -> ToolDescriptor:
    return load_registry(snapshot({"tell-joke": tool(**fields)})).tools[
        fields.get("name", "tell-joke")
    ]


def problems(snap: Any, **kwargs: Any) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        load_registry(snap, **kwargs)
    return list(caught.value.problems)


def only_problem(snap: Any, **kwargs: Any) -> Problem:
    found = problems(snap, **kwargs)
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------- loading


def test_a_valid_snapshot_becomes_descriptors() -> None:
    registry = load_registry(snapshot())

    assert isinstance(registry, Registry)
    svc = registry.services["joke-service"]
    assert svc.id == "joke-service"
    assert svc.request_queue == "non-persistent://tg/request/joke"
    assert svc.response_queue == "non-persistent://tg/response/joke"
    assert svc.config_params == (ConfigParam("style", required=False),)
    joke = registry.tools["tell-joke"]
    assert joke.key == "tell-joke"
    assert joke.type == "tool-service"
    assert joke.name == joke.llm_name == "tell-joke"
    assert joke.description == "Tell a joke on a given topic"
    assert joke.service == "joke-service"
    assert joke.arguments == (ToolArgument("topic", "string", "The topic", True, {}),)


def test_descriptors_may_be_json_strings() -> None:
    snap = {
        "tool-service": {"joke-service": json.dumps(service())},
        "tool": {"tell-joke": json.dumps(tool(style="pun"))},
    }
    as_strings = load_registry(snap)
    as_objects = load_registry(snapshot({"tell-joke": tool(style="pun")}))

    assert as_strings.tools == as_objects.tools
    assert as_strings.services == as_objects.services


def test_the_snapshot_key_is_the_service_id_when_id_is_omitted() -> None:
    registry = load_registry(snapshot(services={"joke-service": service(id=None)}))

    assert registry.services["joke-service"].id == "joke-service"


def test_empty_snapshot_gives_an_empty_registry() -> None:
    registry = load_registry({})

    assert dict(registry.tools) == {}
    assert dict(registry.services) == {}


def test_other_top_level_sections_are_ignored_but_kept() -> None:
    snap = snapshot() | {"hooks": {"anything": "goes"}, "permissions": 42}

    registry = load_registry(snap)

    assert registry.snapshot["hooks"] == {"anything": "goes"}
    assert registry.snapshot["permissions"] == 42
    assert list(registry.tools) == ["tell-joke"]


def test_tools_keep_configuration_order() -> None:
    names = ["zeta", "alpha", "mid"]
    registry = load_registry(snapshot({n: tool(name=n) for n in names}))

    assert list(registry.tools) == names


def test_raw_keeps_the_whole_descriptor_for_plugins() -> None:
    joke = load_tool(style="pun", **{"x-plugin": {"depth": 2}})

    assert joke.raw["x-plugin"] == {"depth": 2}
    assert joke.raw["style"] == "pun"
    assert joke.raw["name"] == "tell-joke"


# --------------------------------------------------------------------------- groups and states


def test_absent_group_means_the_default_group() -> None:
    assert load_tool(group=None).groups == ("default",)


def test_explicit_empty_group_stays_empty() -> None:
    assert load_tool(group=[]).groups == ()


def test_groups_are_kept_as_given() -> None:
    assert load_tool(group=["read-only", "Knowledge"]).groups == ("read-only", "Knowledge")


def test_absent_applicable_states_means_every_state() -> None:
    assert load_tool().applicable_states is None


def test_empty_applicable_states_stays_empty() -> None:
    assert load_tool(**{"applicable-states": []}).applicable_states == ()


@pytest.mark.parametrize("key", ["applicable-states", "available_in_states", "available-in-states"])
def test_applicable_states_aliases(key: str) -> None:
    assert load_tool(**{key: ["undefined", "research"]}).applicable_states == (
        "undefined",
        "research",
    )


def test_two_aliases_with_the_same_states_are_accepted() -> None:
    joke = load_tool(**{"applicable-states": ["a", "b"], "available_in_states": ["b", "a"]})

    assert joke.applicable_states == ("a", "b")


def test_two_aliases_with_different_states_are_a_problem() -> None:
    found = only_problem(
        snapshot({"tell-joke": tool(**{"applicable-states": ["a"], "available-in-states": ["b"]})})
    )

    assert found.where == "tool 'tell-joke'"
    assert found.field == "applicable-states"
    assert "'available-in-states'" in found.message
    assert "keep only 'applicable-states'" in found.message


def test_state_is_the_next_state() -> None:
    assert load_tool(state="analysis").state == "analysis"


@pytest.mark.parametrize("fields", [{}, {"state": ""}])
def test_no_state_or_empty_state_means_no_transition(fields: dict[str, Any]) -> None:
    assert load_tool(**fields).state is None


# --------------------------------------------------------------------------- config params


def test_declared_config_params_are_forwarded_with_their_json_types() -> None:
    params = ["text", "count", "ratio", "flag", "items", "nested", "nothing"]
    values = {
        "text": "pun",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "items": [1, "two"],
        "nested": {"a": {"b": None}},
        "nothing": None,
    }
    descriptor = tool(undeclared="dropped") | values  # tool() would drop the null
    registry = load_registry(
        snapshot({"tell-joke": descriptor}, {"joke-service": service(**{"config-params": params})})
    )

    assert dict(registry.tools["tell-joke"].config) == values


def test_config_params_may_be_plain_strings_which_are_optional() -> None:
    registry = load_registry(
        snapshot(services={"joke-service": service(**{"config-params": ["style", "mood"]})})
    )

    assert registry.services["joke-service"].config_params == (
        ConfigParam("style"),
        ConfigParam("mood"),
    )
    assert dict(registry.tools["tell-joke"].config) == {}


def test_a_missing_required_config_param_is_a_problem_with_the_fix() -> None:
    required = {"config-params": [{"name": "collection", "required": True}]}

    found = only_problem(snapshot(services={"joke-service": service(**required)}))

    assert found.where == "tool 'tell-joke'"
    assert found.field == "collection"
    assert "required config param of tool-service 'joke-service'" in found.message
    assert 'add "collection": <value>' in found.message


def test_config_param_required_defaults_to_false() -> None:
    registry = load_registry(
        snapshot(services={"joke-service": service(**{"config-params": [{"name": "style"}]})})
    )

    assert registry.services["joke-service"].config_params == (ConfigParam("style", False),)


# --------------------------------------------------------------------------- arguments


def test_arguments_default_to_required_and_keep_json_schema_extras() -> None:
    joke = load_tool(
        arguments=[
            {"name": "topic", "type": "string", "description": "t", "enum": ["cats", "dogs"]},
            {
                "name": "count",
                "type": "integer",
                "description": "c",
                "required": False,
                "minimum": 1,
                "default": 1,
            },
        ]
    )

    topic, count = joke.arguments
    assert topic.required is True
    assert dict(topic.schema_extras) == {"enum": ["cats", "dogs"]}
    assert count.required is False
    assert dict(count.schema_extras) == {"minimum": 1, "default": 1}


def test_no_arguments_is_fine() -> None:
    assert load_tool(arguments=None).arguments == ()
    assert load_tool(arguments=[]).arguments == ()


def test_a_tool_takes_its_declared_arguments_and_those_its_options_name() -> None:
    options = {"args": {"defaults": {"lang": "en"}, "fixed": {"tenant": "{user}"}}}
    options["envs"] = {"api_key": "JOKE_API_KEY"}
    joke = load_tool(options=options)
    bare = load_tool(arguments=None)

    assert joke.accepted_arguments == {"topic", "lang", "tenant", "api_key"}
    assert joke.undeclared({"topic": "cats", "lang": "de", "secret": 1, "x": 2}) == ["secret", "x"]
    assert bare.accepted_arguments == frozenset()
    assert bare.undeclared({"topic": "cats"}) == ["topic"]


def test_additional_arguments_lets_a_tool_take_any() -> None:
    open_tool = load_tool(**{"additional-arguments": True})

    assert open_tool.additional_arguments and open_tool.accepted_arguments is None
    assert open_tool.undeclared({"topic": "cats", "anything": [1]}) == []
    assert load_tool(**{"additional-arguments": False}).undeclared({"x": 1}) == ["x"]


def test_additional_arguments_must_be_true_or_false() -> None:
    found = only_problem(snapshot({"tell-joke": tool(**{"additional-arguments": "yes"})}))

    assert found.field == "additional-arguments" and "must be true" in found.message


@pytest.mark.parametrize(
    ("arguments", "field", "expected"),
    [
        ("topic", "arguments", "must be a list"),
        (["topic"], "arguments[0]", "must be an object"),
        ([{"type": "string", "description": "d"}], "arguments[0]", "non-empty string 'name'"),
        ([{"name": "t", "description": "d"}], "arguments[0]", "argument 't': needs a 'type'"),
        (
            [{"name": "t", "type": "str", "description": "d"}],
            "arguments[0]",
            "'type' is the string \"str\", not a JSON Schema type; did you mean 'string'?",
        ),
        ([{"name": "t", "type": "string"}], "arguments[0]", "needs a string 'description'"),
        (
            [{"name": "t", "type": "string", "description": "d", "required": "no"}],
            "arguments[0]",
            "'required' must be true or false",
        ),
        (
            [
                {"name": "t", "type": "string", "description": "d"},
                {"name": "t", "type": "number", "description": "d"},
            ],
            "arguments[1]",
            "argument 't' is declared twice",
        ),
    ],
)
def test_bad_arguments_are_problems(arguments: Any, field: str, expected: str) -> None:
    found = only_problem(snapshot({"tell-joke": tool(arguments=arguments)}))

    assert found.where == "tool 'tell-joke'"
    assert found.field == field
    assert expected in found.message


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("fields", "field", "expected"),
    [
        ({"type": None}, "type", "is required; use 'tool-service'"),
        ({"type": "tool_service"}, "type", "did you mean 'tool-service'?"),
        ({"type": 7}, "type", "the number 7 is not a known tool type"),
        ({"name": None}, "name", "is required"),
        ({"name": ""}, "name", "must be a non-empty string"),
        ({"name": ["x"]}, "name", "must be a non-empty string, not an array"),
        ({"name": "!!!"}, "name", "has no ASCII letter or digit"),
        ({"name": "日本語"}, "name", "the LLM would see it as '_'"),
        ({"description": None}, "description", "is required"),
        ({"description": "   "}, "description", "must be a non-empty string"),
        ({"service": None}, "service", "is required for a 'tool-service' tool"),
        ({"service": "joke-servise"}, "service", "did you mean 'joke-service'?"),
        ({"service": "weather"}, "service", "configured services: joke-service"),
        ({"service": 1}, "service", "must be a tool-service id"),
        ({"group": "admin"}, "group", 'write ["admin"]'),
        ({"group": ["admin", 3]}, "group", "must be a list of strings"),
        ({"group": ["*"]}, "group", "'*' is a wildcard only in requested groups"),
        ({"state": 3}, "state", "must be a string"),
        ({"state": ["a"]}, "state", "must be a string"),
        ({"applicable-states": "analysis"}, "applicable-states", "must be a list of strings"),
        ({"available_in_states": [None]}, "available_in_states", "must be a list of strings"),
        ({"groups": ["admin"]}, "groups", "so it would be ignored; did you mean 'group'?"),
        ({"styles": "pun"}, "styles", "config param of tool-service 'joke-service'"),
    ],
)
def test_each_tool_problem_names_the_tool_and_field(
    fields: dict[str, Any], field: str, expected: str
) -> None:
    found = only_problem(snapshot({"tell-joke": tool(**fields)}))

    assert found.where.startswith("tool 'tell-joke'")
    assert found.field == field
    assert expected in found.message


def test_a_tool_whose_name_differs_from_its_key_is_named_both_ways() -> None:
    found = only_problem(snapshot({"joke": tool(name="tell-joke", description=None)}))

    assert found.where == "tool 'joke' (name 'tell-joke')"


@pytest.mark.parametrize(
    ("fields", "field", "expected"),
    [
        ({"id": "other"}, "id", "stored under key 'joke-service'"),
        ({"request-queue": None}, "request-queue", "is required"),
        ({"response-queue": None}, "response-queue", "is required"),
        ({"request-queue": ""}, "request-queue", "must be a non-empty queue name"),
        ({"request-queue": 5}, "request-queue", "must be a non-empty queue name"),
        ({"request-queue": "bad://tg/request/joke"}, "request-queue", "has scheme 'bad'"),
        ({"response-queue": "persistent://tg/x"}, "response-queue", "tenant/namespace/name"),
        (
            {"response-queue": "non-persistent://tg/request/joke"},
            "response-queue",
            "the service would read its own responses",
        ),
        ({"config-params": "style"}, "config-params", "must be a list"),
        ({"config-params": [3]}, "config-params[0]", "must be a name or"),
        ({"config-params": [{"required": True}]}, "config-params[0]", "non-empty string 'name'"),
        ({"config-params": [{"name": "s", "required": 1}]}, "config-params[0]", "true or false"),
        ({"config-params": ["style", "style"]}, "config-params[1]", "declares 'style' twice"),
    ],
)
def test_each_service_problem_names_the_service_and_field(
    fields: dict[str, Any], field: str, expected: str
) -> None:
    found = only_problem(snapshot({}, {"joke-service": service(**fields)}))

    assert found.where == "tool-service 'joke-service'"
    assert found.field == field
    assert expected in found.message


def test_a_bad_queue_name_reports_the_queue_parser_reason() -> None:
    found = only_problem(snapshot({}, {"joke-service": service(**{"request-queue": "a b"})}))

    assert "cannot map onto every broker" in found.message


def test_a_tool_of_a_broken_service_is_not_blamed_for_it() -> None:
    found = problems(snapshot(services={"joke-service": service(**{"request-queue": None})}))

    assert [p.where for p in found] == ["tool-service 'joke-service'"]


def test_plugin_tool_types_are_accepted_when_registered() -> None:
    snap = snapshot({"search": {"type": "web-search", "name": "search", "description": "d"}})

    assert problems(snap)[0].message.startswith('the string "web-search" is not a known tool')
    registry = load_registry(snap, tool_types=BUILTIN_TOOL_TYPES | {"web-search"})
    assert registry.tools["search"].service is None
    assert registry.tools["search"].type == "web-search"


def test_duplicate_tool_names_are_a_problem() -> None:
    found = only_problem(snapshot({"a": tool(), "b": tool()}))

    assert found.where == "tool 'b' (name 'tell-joke')"
    assert found.field == "name"
    assert "also the name of tool 'a'" in found.message


def test_names_that_sanitize_to_the_same_llm_name_are_a_problem() -> None:
    found = only_problem(snapshot({"a": tool(name="tell joke"), "b": tool(name="tell/joke")}))

    assert found.where == "tool 'b' (name 'tell/joke')"
    assert "both become the LLM function name 'tell_joke'" in found.message


def test_a_name_clash_is_reported_with_the_other_problems_of_the_tools() -> None:
    found = problems(snapshot({"a": tool(description=None), "b": tool(type="x")}))

    assert [(p.field, p.where) for p in found] == [
        ("description", "tool 'a' (name 'tell-joke')"),
        ("type", "tool 'b' (name 'tell-joke')"),
        ("name", "tool 'b' (name 'tell-joke')"),
    ]


def test_every_problem_is_reported_at_once() -> None:
    snap = {
        "tool-service": {"joke-service": service(**{"request-queue": None, "id": "x"})},
        "tool": {
            "a": tool(type=None, name=None),
            "b": tool(name="b", service="nope", group="x"),
            "c": "{not json",
            "d": 17,
        },
    }

    with pytest.raises(ConfigError) as caught:
        load_registry(snap)

    where = [p.where for p in caught.value.problems]
    assert where == [
        "tool-service 'joke-service'",
        "tool-service 'joke-service'",
        "tool 'a'",
        "tool 'a'",
        "tool 'b'",
        "tool 'b'",
        "tool 'c'",
        "tool 'd'",
    ]
    text = str(caught.value)
    assert text.startswith("invalid configuration (8 problems):")
    assert all(str(p) in text for p in caught.value.problems)


@pytest.mark.parametrize(
    ("descriptor", "expected"),
    [
        ("{not json", "descriptor string is not valid JSON"),
        ('{"name": "a", "name": "b"}', "key 'name' appears twice"),
        ('{"x": NaN}', "NaN is not valid JSON"),
        ('["a list"]', "must be a JSON object (or a JSON string holding one), not an array"),
        (None, "not null"),
    ],
)
def test_bad_descriptor_values_are_problems(descriptor: Any, expected: str) -> None:
    found = only_problem(snapshot({"tell-joke": descriptor}))

    assert found.where == "tool 'tell-joke'"
    assert expected in found.message


def test_a_section_that_is_not_an_object_is_a_problem() -> None:
    found = only_problem({"tool": ["tell-joke"]})

    assert found.where == "snapshot section 'tool'"
    assert "not an array" in found.message


def test_a_snapshot_that_is_not_an_object_is_a_problem() -> None:
    assert "not an array" in only_problem([1, 2]).message


def test_loading_is_all_or_nothing() -> None:
    good = load_registry(snapshot())
    bad = snapshot({"tell-joke": tool(), "broken": tool(name="other", service="missing")})

    live = good
    with pytest.raises(ConfigError):
        live = load_registry(bad)

    assert live is good
    assert list(live.tools) == ["tell-joke"]


# --------------------------------------------------------------------------- descriptors


def test_descriptors_are_immutable_and_hashable() -> None:
    joke = load_tool(style="pun", **{"x-extra": 1})

    with pytest.raises(AttributeError):
        joke.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        joke.config["style"] = "knock-knock"  # type: ignore[index]
    with pytest.raises(TypeError):
        joke.raw["x-extra"] = 2  # type: ignore[index]
    assert hash(joke) == hash(load_tool(style="pun", **{"x-extra": 1}))


def test_a_descriptor_derives_its_llm_name() -> None:
    joke = ToolDescriptor(key="k", type="tool-service", name="Tell a joke!", description="d")

    assert joke.llm_name == "Tell_a_joke_"
    assert joke.groups == ("default",)
    assert joke.applicable_states is None
    assert dict(joke.config) == {}


# --------------------------------------------------------------------------- reading snapshots


def test_a_file_and_a_directory_hold_the_same_workflow() -> None:
    from_file = load_registry_from_path(DATA / "workflow.json")
    from_dir = load_registry_from_path(DATA / "workflow")

    assert dict(from_file.tools) == dict(from_dir.tools)
    assert dict(from_file.services) == dict(from_dir.services)
    assert set(from_file.tools) == {
        "knowledge-query",
        "graph-update",
        "text-completion",
        "complex-analysis",
        "reset-workflow",
    }


def test_load_registry_from_path_accepts_plugin_types(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"tool": {"s": {"type": "web", "name": "s", "description": "d"}}}))

    with pytest.raises(ConfigError):
        load_registry_from_path(path)
    assert list(load_registry_from_path(str(path), tool_types={"web"}).tools) == ["s"]


def test_a_directory_snapshot_uses_file_names_as_keys(tmp_path: Path) -> None:
    (tmp_path / "tool-service").mkdir()
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool-service" / "joke-service.json").write_text(json.dumps(service()))
    (tmp_path / "tool" / "tell-joke.json").write_text(json.dumps(tool()))

    assert read_snapshot(tmp_path) == {
        "tool": {"tell-joke": tool()},
        "tool-service": {"joke-service": service()},
    }


def test_a_directory_snapshot_reads_other_sections_and_skips_other_files(tmp_path: Path) -> None:
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "a.json").write_text('{"x": 1}')
    (tmp_path / "tool" / "README.md").write_text("not configuration")
    (tmp_path / "tool" / ".hidden.json").write_text("{broken")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.json").write_text("{broken")
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "h.json").write_text('{"kind": "tool_call"}')
    (tmp_path / "permissions.json").write_text('{"alice": ["admin"]}')

    assert read_snapshot(tmp_path) == {
        "tool": {"a": {"x": 1}},
        "hooks": {"h": {"kind": "tool_call"}},
        "permissions": {"alice": ["admin"]},
    }


def test_a_section_given_twice_in_a_directory_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool.json").write_text("{}")

    with pytest.raises(ConfigError, match="given both as a directory and as a file"):
        read_snapshot(tmp_path)


def test_every_bad_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "a.json").write_text('{"name": "a",}')
    (tmp_path / "tool" / "b.json").write_bytes(b'{"name": "\xff"}')
    (tmp_path / "tool" / "c.json").write_text('{"name": "c"}')

    with pytest.raises(ConfigError) as caught:
        read_snapshot(tmp_path)

    found = caught.value.problems
    assert [p.where for p in found] == [
        f"file '{tmp_path / 'tool' / 'a.json'}'",
        f"file '{tmp_path / 'tool' / 'b.json'}'",
    ]
    assert "is not valid JSON" in found[0].message
    # Where the parser stopped: Python 3.13 points at the comma, earlier ones after it.
    assert re.search(r"\(line 1, column 1[34]\)", found[0].message), found[0].message
    assert "is not UTF-8 text" in found[1].message


def test_a_missing_path_is_a_problem_with_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"

    with pytest.raises(ConfigError) as caught:
        read_snapshot(missing)

    (found,) = caught.value.problems
    assert found.where == f"file '{missing}'"
    assert "does not exist" in found.message
    assert "tool-service/ and tool/" in found.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2]", "holds an array; a snapshot is a JSON object"),
        ('{"tool": {}, "tool": {}}', "key 'tool' appears twice"),
        ('{"tool": {"a": {"x": Infinity}}}', "Infinity is not valid JSON"),
        ("", "is not valid JSON"),
    ],
)
def test_a_bad_snapshot_file_is_a_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "snap.json"
    path.write_text(text)

    with pytest.raises(ConfigError, match=r"snap\.json") as caught:
        read_snapshot(path)

    assert expected in str(caught.value)


def test_a_byte_order_mark_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(snapshot()).encode())

    assert read_snapshot(path) == snapshot()


def test_an_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    # A dangling symbolic link: unreadable for every user, root included.
    (tmp_path / "permissions.json").symlink_to(tmp_path / "gone.json")

    with pytest.raises(ConfigError) as caught:
        read_snapshot(tmp_path)

    (found,) = caught.value.problems
    assert found.where == f"file '{tmp_path / 'permissions.json'}'"
    assert found.message.startswith("cannot be read: ")


# --------------------------------------------------------------------------- the docs

DOC_BLOCKS = [
    pytest.param(block, id=f"{page}#{index}")
    for page in ["configuration.md", "groups-and-states.md"]
    for index, block in enumerate(
        re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text("utf-8"), re.S)
    )
]


def test_the_docs_have_python_examples() -> None:
    assert len(DOC_BLOCKS) >= 4


@pytest.mark.parametrize("code", DOC_BLOCKS)
def test_the_python_examples_in_the_docs_run(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples use paths relative to the repository root

    exec(compile(code, "<docs>", "exec"), {})


# --------------------------------------------------------------------------- trustgraph-wire


def test_a_service_is_called_with_the_newest_trustgraph_request_by_default() -> None:
    assert load_registry(snapshot()).services["joke-service"].generation == "2.4"


@pytest.mark.parametrize(
    ("given", "generation"),
    [("2.1", "2.1"), ("2.4", "2.4"), ("2.1.28", "2.1"), ("2.3.21", "2.1"), ("2.11.1", "2.4")],
)
def test_trustgraph_wire_takes_a_generation_or_a_release(given: str, generation: str) -> None:
    registry = load_registry(
        snapshot(services={"joke-service": service(**{"trustgraph-wire": given})})
    )

    assert registry.services["joke-service"].generation == generation


@pytest.mark.parametrize(("given", "reason"), [("1.9", "no tool-service wire"), (2.4, "string")])
def test_a_bad_trustgraph_wire_names_the_service_and_the_choices(given: Any, reason: str) -> None:
    problem = only_problem(
        snapshot(services={"joke-service": service(**{"trustgraph-wire": given})})
    )

    assert (problem.where, problem.field) == ("tool-service 'joke-service'", "trustgraph-wire")
    assert reason in problem.message
    assert "'2.1'" in problem.message and "'2.4'" in problem.message


@pytest.mark.parametrize("value", ["optional", "required", "forbidden"])
def test_task_support_says_whether_calls_run_as_tasks(value: str) -> None:
    assert load_tool(**{"task-support": value}).task_support == value
    assert load_tool().task_support == "optional"


def test_a_task_support_that_is_none_of_the_three_is_named_with_them() -> None:
    problem = only_problem(snapshot(tools={"tell-joke": tool(**{"task-support": "sometimes"})}))
    assert problem.field == "task-support"
    assert '"sometimes"' in problem.message
    assert all(value in problem.message for value in ("optional", "required", "forbidden"))
