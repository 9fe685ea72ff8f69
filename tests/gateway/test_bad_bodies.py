"""What Python's json would read or choke on is a 400 bad-json in the gateway's error shape."""

from __future__ import annotations

import pytest

from tests.gateway.support import RunningGateway

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"arguments": {"text": "\xff"}}', "the body is not UTF-8"),
        (b'{"arguments": {"text": NaN}}', "NaN is not a JSON number"),
        (b'{"arguments": {"text": -Infinity}}', "-Infinity is not a JSON number"),
        (b"[" * 20_000 + b"]" * 20_000, "the body nests too deeply"),
        (b'{"arguments": {"text": ' + b"9" * 5000 + b"}}", "a number has too many digits"),
        (b'{"arguments": ', "Expecting value"),
    ],
    ids=["not-utf8", "nan", "infinity", "deep", "long-number", "cut-short"],
)
async def test_a_body_that_is_not_json_is_a_bad_json_answer(
    served: RunningGateway, body: bytes, reason: str
) -> None:
    async with served.client("alice") as http:
        answer = await http.post(
            "/v1/tools/echo/call", content=body, headers={"Content-Type": "application/json"}
        )

    assert answer.status_code == 400, answer.text
    assert answer.json().keys() == {"error", "message"}
    assert answer.json()["error"] == "bad-json"
    assert f"is not valid JSON ({reason}" in answer.json()["message"]


async def test_a_path_or_method_the_gateway_does_not_have_answers_in_its_error_shape(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        missing = await http.get("/v1/no-such-thing")
        wrong = await http.put("/v1/tools")
        # GET and DELETE are two routes of one path: Allow names both.
        options = await http.options("/v1/sessions/some-id")

    assert (missing.status_code, missing.json()["error"]) == (404, "not-found")
    assert (wrong.status_code, wrong.json()["error"]) == (405, "method-not-allowed")
    assert wrong.headers["allow"] == "GET"
    assert (options.status_code, options.headers["allow"]) == (405, "DELETE, GET")
    assert missing.json().keys() == wrong.json().keys() == {"error", "message"}


async def test_the_document_says_what_every_operation_may_answer(served: RunningGateway) -> None:
    async with served.client() as http:
        document = (await http.get("/openapi.json")).json()

    for path, operations in document["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            answers = operation["responses"]
            assert {"400", "401", "403", "404", "409", "422", "429"} <= answers.keys(), (
                method,
                path,
            )
            schema = answers["422"]["content"]["application/json"]["schema"]
            named = schema.get("anyOf", [schema])
            assert {"$ref": "#/components/schemas/ErrorAnswer"} in named, (method, path)
            if path.endswith(("/events", "/stream")):
                assert list(answers["200"]["content"]) == ["text/event-stream"], path
