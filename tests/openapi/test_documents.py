"""OpenAPI documents as tools: a published real-world document, naming, filters, bad documents."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.schemas import export_tools
from toolbus.domain.errors import ConfigError
from toolbus.domain.live.announcements import announced_tools
from toolbus_openapi import ToolsetSettings, open_toolset, read_document, read_operations
from toolbus_openapi.document import parse_document
from toolbus_openapi.service import OpenAPIService

DATA = Path(__file__).resolve().parents[1] / "data" / "openapi"
PETSTORE = DATA / "petstore.yaml"


def doc(paths: dict[str, Any], **extra: Any) -> str:
    return json.dumps(
        {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": paths, **extra}
    )


def catalog_of(text: str, **filters: Any) -> Any:
    return read_operations(parse_document(text, "test.json", "file:///test.json"), "t", **filters)


def problems_of(text: str, **filters: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        catalog_of(text, **filters)
    return [problem.message for problem in caught.value.problems]


def op(operation_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {**({"operationId": operation_id} if operation_id else {}), **extra}


def test_every_operation_of_the_swagger_petstore_becomes_a_valid_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = yaml.safe_load(PETSTORE.read_text(encoding="utf-8"))
    every_id = {
        operation["operationId"]
        for item in raw["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    caplog.set_level(logging.WARNING)

    service = open_toolset(ToolsetSettings("petstore", str(PETSTORE)))

    served = {operation.operation_id for operation in service.catalog.operations}
    # The one operation whose only body is raw bytes is skipped, with one warning naming it.
    assert every_id - served == {"uploadFile"}
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "uploadFile (POST /pet/{petId}/uploadImage)" in warning
    assert "application/octet-stream not supported" in warning
    # The tools validate as toolbus configuration, and each argument schema is valid JSON Schema.
    registry = load_registry(
        {
            "tool-service": {service.id: service.descriptor()},
            "tool": announced_tools(service.id, service.tools()),
        }
    )
    assert len(registry.tools) == len(every_id) - 1
    for tool in export_tools(registry.tools.values(), "openai"):
        function = tool["function"]
        assert function["name"] == sanitize_toolname(f"petstore_{function['name'][9:]}")
        assert function["description"]
        jsonschema.Draft202012Validator.check_schema(function["parameters"])
        assert "$ref" not in json.dumps(function["parameters"])
    add_pet = registry.tool("petstore_addPet")
    assert {a.name: a.required for a in add_pet.arguments} == {
        "id": False,
        "category": False,
        "name": True,
        "photoUrls": True,
        "tags": False,
        "status": False,
    }
    assert service.executor.base_url == "https://petstore.swagger.io/v2"


def test_schemas_are_resolved_and_open_api_3_0_keywords_turned_into_json_schema() -> None:
    components = {
        "schemas": {
            "Node": {
                "type": "object",
                "required": ["label"],
                "properties": {
                    "label": {"type": "string", "nullable": True, "example": "root"},
                    "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                },
            }
        }
    }
    tree = {"type": "object", "properties": {"root": {"$ref": "#/components/schemas/Node"}}}
    body = {"required": True, "content": {"application/json": {"schema": tree}}}
    catalog = catalog_of(
        doc({"/trees": {"post": op("addTree", requestBody=body)}}, components=components)
    )

    (operation,) = catalog.operations
    (root,) = operation.arguments
    assert root == {
        "name": "root",
        "type": "object",
        "description": "body field root",
        "required": False,
        "properties": {
            "label": {"type": ["string", "null"], "examples": ["root"]},
            # Recursion is inlined once, then cut with a note.
            "children": {
                "type": "array",
                "items": {"description": "a Node (the same shape as the enclosing Node)"},
            },
        },
        # The argument's own "required" is its flag: the object's list moves to allOf.
        "allOf": [{"required": ["label"]}],
    }


def test_operations_without_an_operation_id_get_a_stable_name() -> None:
    catalog = catalog_of(doc({"/pets/{petId}/photos": {"get": op(summary="Photos")}}))

    (operation,) = catalog.operations
    assert operation.operation_id == "get_pets_petId_photos"
    assert operation.tool == "t_get_pets_petId_photos"


def test_a_bad_document_is_refused_with_every_problem_listed_at_once() -> None:
    text = doc(
        {
            "/a_b": {"get": op()},  # named get_a_b ...
            "/a/b": {"get": op()},  # ... and so is this one
            "/x": {"get": op("same"), "post": op("same")},
            "/y": {
                "post": op(
                    "brokenRef",
                    requestBody={
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Nope"}}
                        }
                    },
                )
            },
        }
    )

    problems = problems_of(text, exclude=["nothing-like-this"])

    assert len(problems) == 4, problems
    assert "GET /a/b and GET /a_b are both named 'get_a_b'" in problems[0]
    assert "give it one" in problems[0]
    assert "POST /x and GET /x are both named 'same': operationIds must be unique" in problems[1]
    assert "--exclude 'nothing-like-this' names no operationId or tag" in problems[2]
    assert "brokenRef (POST /y): $ref '#/components/schemas/Nope' does not resolve" in problems[3]


def test_an_unsupported_operation_asked_for_by_name_is_a_problem_not_a_skip() -> None:
    upload = op(
        "upload",
        requestBody={"required": True, "content": {"multipart/form-data": {"schema": {}}}},
    )
    paths = {"/files": {"post": upload}, "/ok": {"get": op("ok")}}

    assert [s.operation for s in catalog_of(doc(paths)).skipped] == ["upload (POST /files)"]
    (problem,) = problems_of(doc(paths), include=["upload", "ok"])
    assert (
        "--include 'upload' cannot be served: request body type(s) multipart/form-data" in problem
    )


def test_include_and_exclude_take_operation_ids_and_tags() -> None:
    paths = {
        "/a": {"get": op("a", tags=["read"]), "post": op("addA", tags=["write"])},
        "/b": {"get": op("b", tags=["read"])},
    }

    def ids(**filters: Any) -> list[str]:
        return [o.operation_id for o in catalog_of(doc(paths), **filters).operations]

    assert ids(include=["read"]) == ["a", "b"]
    assert ids(include=["read", "addA"], exclude=["b"]) == ["a", "addA"]
    assert ids(exclude=["write"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"openapi": "3.0.0", "paths": {', "is not valid JSON"),
        ("openapi: 3.0.0\npaths: [\n", "is not valid YAML"),
        ('{"swagger": "2.0"}', "is a Swagger 2.0 document; convert it to OpenAPI 3"),
        ('{"openapi": "4.0"}', "OpenAPI 3.0 and 3.1 are supported"),
        ("- just a list", "expected a JSON or YAML object"),
    ],
)
def test_unreadable_documents_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_document(text, "spec.txt", "file:///spec.txt")


def test_a_document_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"OpenAPI document .*missing.yaml: cannot be read"):
        read_document(tmp_path / "missing.yaml")


def test_refs_to_a_file_next_to_the_document_are_resolved(tmp_path: Path) -> None:
    (tmp_path / "schemas.yaml").write_text(
        "Pet:\n  type: object\n  properties:\n    name: {type: string}\n", encoding="utf-8"
    )
    body = {"content": {"application/json": {"schema": {"$ref": "schemas.yaml#/Pet"}}}}
    (tmp_path / "api.json").write_text(doc({"/pets": {"post": op("addPet", requestBody=body)}}))

    catalog = read_operations(read_document(tmp_path / "api.json"), "t")

    assert [a["name"] for a in catalog.operations[0].arguments] == ["name"]


def test_toolset_settings_problems_are_listed_together() -> None:
    from toolbus_openapi import Credential

    settings = ToolsetSettings(
        "bad.name",
        str(PETSTORE),
        base_url="ftp://example.org",
        credentials=(Credential("bearer", "PETSTORE_TOKEN_UNSET"),),
    )

    with pytest.raises(ConfigError) as caught:
        open_toolset(settings, environ={})

    text = str(caught.value)
    assert "3 problems" in text
    assert "toolset name is letters, digits" in text
    assert "PETSTORE_TOKEN_UNSET (bearer token from $PETSTORE_TOKEN_UNSET) is not set" in text
    assert "must be an absolute http:// or https:// URL" in text


def test_a_relative_server_url_needs_a_base_url_for_a_local_document(tmp_path: Path) -> None:
    spec = tmp_path / "api.json"
    spec.write_text(doc({"/a": {"get": op("a")}}, servers=[{"url": "/api"}]))

    with pytest.raises(ConfigError, match="relative to where it is served; give --base-url"):
        open_toolset(ToolsetSettings("t", str(spec)))
    service = open_toolset(ToolsetSettings("t", str(spec), base_url="http://127.0.0.1:9/api"))
    assert isinstance(service, OpenAPIService)


def test_headers_that_would_change_delivery_are_not_arguments() -> None:
    headers = ["Host", "Content-Length", "Transfer-Encoding", "Connection", "Accept", "X-Tag"]
    parameters = [{"name": name, "in": "header", "schema": {"type": "string"}} for name in headers]

    (operation,) = catalog_of(doc({"/a": {"get": op("a", parameters=parameters)}})).operations

    assert [argument["name"] for argument in operation.arguments] == ["X-Tag"]


def test_yaml_dates_stay_strings_so_the_tools_can_be_announced() -> None:
    text = (
        "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths:\n  /orders:\n    get:\n"
        "      operationId: listOrders\n      parameters:\n"
        "        - {name: since, in: query, schema: {type: string, example: 2024-01-31}}\n"
    )

    (operation,) = catalog_of(text).operations

    assert operation.arguments[0]["examples"] == ["2024-01-31"]
    json.dumps(operation.descriptor())


def test_operation_ids_that_make_one_tool_name_get_names_of_their_own() -> None:
    long = "PostTestHelpersIssuingPersonalizationDesignsPersonalizationDesign"
    paths = {
        "/a": {"post": op(f"{long}Activate")},
        "/b": {"post": op(f"{long}Deactivate")},
        "/c": {"get": op("get.pet"), "post": op("get_pet")},
        "/d": {"get": op("plain")},
    }

    everything = {o.operation_id: o.tool for o in catalog_of(doc(paths)).operations}
    one = {o.operation_id: o.tool for o in catalog_of(doc(paths), include=["get.pet"]).operations}

    assert everything["plain"] == "t_plain"
    hashed = [everything[key] for key in everything if key != "plain"]
    assert len(set(hashed)) == 4
    assert all(len(name) == 64 or name.startswith("t_get_pet_") for name in hashed)
    assert everything[f"{long}Activate"].startswith(f"t_{long}"[:57] + "_")
    # The name does not depend on the filter.
    assert one == {"get.pet": everything["get.pet"]}
