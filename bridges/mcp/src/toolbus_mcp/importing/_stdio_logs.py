"""The MCP SDK's log of a stdio server's stray output, as one line that says what to fix."""

from __future__ import annotations

import logging

import pydantic


class _ParseErrorsInOneLine(logging.Filter):
    """The SDK logs each line a stdio server writes that is not JSON-RPC with a traceback
    of pydantic's errors; what helps is one line saying what came, and what to fix."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        if isinstance(failure, pydantic.ValidationError):
            errors = failure.errors(include_url=False)
            line = str(errors[0].get("input", "")) if errors else ""
            record.msg = (
                "an MCP server wrote a line that is not an MCP message on stdout: %r; a "
                "server speaking stdio writes JSON-RPC there only (logs go to stderr)"
            )
            record.args = (line[:120],)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_PARSE_ERRORS = _ParseErrorsInOneLine()


def quiet_parse_errors() -> None:
    """Install the filter on the SDK's stdio client logger (once)."""
    logger = logging.getLogger("mcp.client.stdio")
    if _PARSE_ERRORS not in logger.filters:
        logger.addFilter(_PARSE_ERRORS)
