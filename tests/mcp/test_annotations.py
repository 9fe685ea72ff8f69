"""An MCP server's tool hints as descriptor annotations, and --approve choosing by them."""

from __future__ import annotations

from typing import Any

import mcp_types as mcp

from toolbus_mcp.importing.translation import toolset_tools


def listed(**hints: Any) -> mcp.Tool:
    return mcp.Tool(
        name=f"t{len(hints)}-{'-'.join(f'{k}{v}' for k, v in hints.items())}",
        input_schema={"type": "object"},
        annotations=mcp.ToolAnnotations(**hints) if hints else None,
    )


def test_destructive_tools_need_approval_as_mcp_defines_them() -> None:
    reader = listed(read_only_hint=True)
    gentle = listed(read_only_hint=False, destructive_hint=False)
    silent = listed()  # no hints: may be destructive, as MCP says
    eraser = listed(destructive_hint=True, idempotent_hint=True)
    tools = [reader, gentle, silent, eraser]

    marked = toolset_tools("files", tools, approve="destructive")
    needs = {d["mcp-tool"] for d in marked.values() if d.get("approval") == "always"}
    assert needs == {silent.name, eraser.name}
    by_tool = {d["mcp-tool"]: d for d in marked.values()}
    assert by_tool[reader.name]["annotations"] == {"readOnlyHint": True}
    assert by_tool[eraser.name]["annotations"] == {
        "destructiveHint": True,
        "idempotentHint": True,
    }

    assert not any("approval" in d for d in toolset_tools("files", tools).values())
    every = toolset_tools("files", tools, approve="all")
    assert all(d["approval"] == "always" for d in every.values())


def test_a_tool_whose_input_schema_allows_more_takes_undeclared_arguments() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    strict = mcp.Tool(name="strict", input_schema=schema)
    loose = mcp.Tool(name="loose", input_schema={**schema, "additionalProperties": True})

    found = {d["mcp-tool"]: d for d in toolset_tools("files", [strict, loose]).values()}

    assert "additional-arguments" not in found["strict"]
    assert found["loose"]["additional-arguments"] is True
    assert [a["name"] for a in found["loose"]["arguments"]] == ["q"]
