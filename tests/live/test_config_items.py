"""Config items (TYPE/KEY), changes, whole-snapshot validation and versions: plain functions."""

from __future__ import annotations

import json

import pytest

from tests.live.support import weather_snapshot, weather_tool
from toolbus.domain.errors import ConfigError
from toolbus.domain.live.items import (
    SNAPSHOT_FORMAT,
    ConfigVersion,
    Delete,
    ItemMissing,
    ItemName,
    Put,
    apply_changes,
    decode_version,
    describe_changes,
    encode_version,
    get_item,
    items_of,
    parse_item,
    parse_type,
    same_value,
    validate_snapshot,
)


def test_an_item_is_named_type_slash_key_and_the_key_may_hold_slashes() -> None:
    assert parse_item("tool/tell-joke") == ItemName("tool", "tell-joke")
    assert parse_item("prompt/a/b") == ItemName("prompt", "a/b")
    assert str(ItemName("tool-service", "joke")) == "tool-service/joke"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("tell-joke", "is not TYPE/KEY"),
        ("/tell-joke", "empty TYPE"),
        ("tool/", "empty KEY"),
        (" tool/x", "surrounding spaces"),
        ("tool/x\n", "control characters"),
    ],
)
def test_a_bad_item_name_says_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_item(text)


def test_a_type_has_no_slash() -> None:
    assert parse_type("tool") == "tool"
    with pytest.raises(ValueError, match="contains '/'"):
        parse_type("tool/x")


def test_changes_make_a_new_snapshot_and_leave_the_old_one_alone() -> None:
    old = weather_snapshot()
    new = apply_changes(
        old,
        [
            Put(ItemName("tool", "forecast"), weather_tool("forecast")),
            Put(ItemName("tool", "weather"), weather_tool(groups=["ops"])),
            Delete(ItemName("tool-service", "weather")),
        ],
    )
    assert old == weather_snapshot()
    # An updated key keeps its place (the order tools are offered in); new ones go last.
    assert list(new["tool"]) == ["weather", "forecast"]
    assert new["tool"]["weather"]["group"] == ["ops"]
    assert "tool-service" not in new  # an emptied section is dropped


def test_deleting_what_is_not_there_is_an_error() -> None:
    with pytest.raises(ItemMissing, match="tool/nope is not in the configuration"):
        apply_changes(weather_snapshot(), [Delete(ItemName("tool", "nope"))])


def test_replace_starts_from_nothing() -> None:
    new = apply_changes(weather_snapshot(), [Put(ItemName("tool", "only"), {"x": 1})], replace=True)
    assert new == {"tool": {"only": {"x": 1}}}


def test_reading_items() -> None:
    snapshot = weather_snapshot()
    assert items_of(snapshot) == [ItemName("tool-service", "weather"), ItemName("tool", "weather")]
    assert items_of(snapshot, "tool") == [ItemName("tool", "weather")]
    assert get_item(snapshot, ItemName("tool", "weather"))["name"] == "weather"
    with pytest.raises(ItemMissing, match="tool has: weather"):
        get_item(snapshot, ItemName("tool", "wether"))
    with pytest.raises(ItemMissing, match="no 'prompt' item at all"):
        get_item(snapshot, ItemName("prompt", "x"))


def test_validation_covers_tools_services_and_permissions_together() -> None:
    snapshot = weather_snapshot(weather=weather_tool(units=None) | {"service": "nope"})
    snapshot["permissions"] = {"users": {"alice": "default"}}

    with pytest.raises(ConfigError) as caught:
        validate_snapshot(snapshot)

    text = str(caught.value)
    assert "names tool-service 'nope'" in text
    assert "snapshot section 'permissions' field 'users.alice'" in text


def test_a_valid_snapshot_gives_its_registry() -> None:
    registry = validate_snapshot(weather_snapshot())
    assert list(registry.tools) == ["weather"]


def test_a_descriptor_as_json_text_is_the_same_value_as_the_object() -> None:
    tool = weather_tool()
    assert same_value(tool, json.dumps(tool))
    assert not same_value(tool, json.dumps(weather_tool(groups=["x"])))
    assert same_value("not json", "not json")


def test_versions_round_trip_and_say_which_supersedes_which() -> None:
    version = ConfigVersion("store-a", 3, weather_snapshot())
    again = decode_version(encode_version(version))
    assert again == version
    assert dict(again.snapshot) == weather_snapshot()

    assert version.supersedes(None)
    assert ConfigVersion("store-a", 4).supersedes(version)
    assert not ConfigVersion("store-a", 3).supersedes(version)  # a repeat
    assert not ConfigVersion("store-a", 2).supersedes(version)  # late
    assert ConfigVersion("store-b", 1).supersedes(version)  # a new store


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"\xff", "not UTF-8"),
        (b"[]", "must be a JSON object"),
        (b'{"format": "x", "store": "s", "version": 1, "snapshot": {}}', "field 'format'"),
        (
            json.dumps({"format": SNAPSHOT_FORMAT, "store": "", "version": -1, "snapshot": []}),
            "3 problems",
        ),
        (b'{"a": 1, "a": 2}', "appears twice"),
    ],
)
def test_a_bad_version_message_is_a_config_error(body: bytes | str, complaint: str) -> None:
    data = body.encode() if isinstance(body, str) else body
    with pytest.raises(ConfigError, match=complaint):
        decode_version(data, where="msg")


def test_changes_are_described_briefly() -> None:
    changes = [Put(ItemName("tool", str(n)), {}) for n in range(7)]
    assert describe_changes(changes) == (
        "put tool/0, put tool/1, put tool/2, put tool/3, put tool/4 and 2 more"
    )


def test_the_known_sections_are_the_ones_their_readers_name() -> None:
    from toolbus.domain.access.permissions import SECTION as PERMISSIONS
    from toolbus.domain.config.descriptors import SERVICES, TOOLS
    from toolbus.domain.hooks.configured import SECTION as HOOKS
    from toolbus.domain.live.items import SNAPSHOT_SECTIONS

    assert set(SNAPSHOT_SECTIONS) == {SERVICES, TOOLS, PERMISSIONS, HOOKS}
