"""A real MCP server, written with the SDK, whose tool asks its client: run as a subprocess.

``python -m tests.mcp.asking_server``: ``delete_file(path)`` asks the client's
person to confirm (elicitation, a form with a default), then its model for a
farewell (sampling), the SDK's resolvers sending each question the way the
client's revision wants it.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel


class Confirmation(BaseModel):
    sure: bool
    note: str = "no note"


def confirmation(path: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {path}?", Confirmation)


def farewell(path: str) -> Sample:
    message = SamplingMessage(role="user", content=TextContent(text=f"Say goodbye to {path}"))
    return Sample([message], max_tokens=20)


def build() -> MCPServer:
    server = MCPServer("asking_server")

    @server.tool()
    def delete_file(
        path: str,
        confirmed: Annotated[Confirmation, Resolve(confirmation)],
        goodbye: Annotated[CreateMessageResult, Resolve(farewell)],
    ) -> str:
        """Delete a file, once its caller confirms."""
        if not confirmed.sure:
            return f"{path} is kept ({confirmed.note})"
        said = goodbye.content.text if isinstance(goodbye.content, TextContent) else "?"
        return f"{path} deleted ({confirmed.note}); {said}"

    return server


if __name__ == "__main__":
    build().run()
