"""``/asyncapi.json``: the deployment's AsyncAPI document, for console operators only."""

from __future__ import annotations

import pytest

from tests.asyncapi.support import schema_problems
from tests.gateway.support import RunningGateway

pytestmark = pytest.mark.anyio


async def test_an_operator_gets_the_document_of_the_gateway_s_deployment(
    served: RunningGateway, broker_url: str
) -> None:
    async with served.client("ops") as http:
        answer = await http.get("/asyncapi.json")
        console = await http.get("/console/asyncapi.json")

    assert answer.status_code == 200
    document = answer.json()
    assert schema_problems(document) == []
    assert console.json() == document
    assert document["servers"]["broker"]["protocol"] == "memory"
    titles = {op["title"] for op in document["operations"].values()}
    assert {"echo", "add-to-cart", "words"} <= titles


async def test_other_callers_are_refused(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        not_an_operator = await http.get("/asyncapi.json")
    async with served.client() as http:
        anonymous = await http.get("/asyncapi.json")

    assert not_an_operator.status_code == 403
    assert anonymous.status_code == 401
