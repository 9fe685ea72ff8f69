"""Showing agent events in a terminal: the answer as it comes, the rest dimmed."""

from __future__ import annotations

import json

import typer

from toolbus.domain.agent.wire import AgentEvent

#: Observations longer than this are cut in the terminal (``--json`` shows them whole).
MAX_OBSERVATION = 300


class EventPrinter:
    """Prints events one by one; remembers whether a streamed message is still open.

    ``steps_on_stderr``: thoughts, calls and observations go to stderr, leaving stdout to
    the answer (or what a caller captures instead of it, a task id).
    """

    def __init__(
        self, *, as_json: bool = False, indent: str = "", steps_on_stderr: bool = False
    ) -> None:
        self.as_json = as_json
        self.indent = indent
        self.steps_on_stderr = steps_on_stderr
        #: The stream a streamed message is open on (stderr: True), if one is.
        self._open: bool | None = None

    def show(self, event: AgentEvent) -> None:
        if self.as_json:
            typer.echo(event.model_dump_json(exclude_none=True))
            return
        kind = event.chunk_type
        steps = self.steps_on_stderr
        if kind == "answer":
            self._write(event.content, event.end_of_message)
        elif kind == "thought":
            self._write(typer.style(event.content, dim=True), event.end_of_message, steps)
        elif kind == "action":
            self._close()
            arguments = (
                event.arguments
                if isinstance(event.arguments, str)
                else json.dumps(event.arguments or {}, ensure_ascii=False)
            )
            typer.echo(
                self.indent + typer.style(f"→ {event.tool}({arguments})", dim=True), err=steps
            )
        elif kind == "approval" and event.approval is not None:
            self._close()
            approvers = ", ".join(event.approval.approvers)
            typer.echo(
                f"{self.indent}waiting for approval {event.approval.id} of {event.tool} "
                f"(approvers: {approvers}): {event.approval.reason}",
                err=True,
            )
        elif kind == "waiting" and event.task is not None:
            self._close()
            task = event.task.id
            typer.echo(
                f"{self.indent}{event.content}: the run waits as task {task} and goes on once "
                f"it is decided ('toolbus tasks show {task}' tells how it goes)",
                err=True,
            )
        elif kind == "input":
            self._close()
            typer.echo(f"{self.indent}{event.content}", err=True)
        elif kind == "observation":
            self._close()
            text = event.content.replace("\n", " ")
            if len(text) > MAX_OBSERVATION:
                text = text[: MAX_OBSERVATION - 1] + "…"
            mark = "←" if event.status == "ok" else f"← [{event.status}]"
            typer.echo(self.indent + typer.style(f"{mark} {text}", dim=True), err=steps)
        elif kind == "error":
            self._close()
            kind_of = event.error.type if event.error else "error"
            typer.echo(f"{self.indent}error ({kind_of}): {event.content}", err=True)
        if event.last:
            self._close()
            self._summary(event)

    def _write(self, text: str, end: bool, err: bool = False) -> None:
        if self._open is not None and self._open != err:
            self._close()
        typer.echo(text if self._open is not None else self.indent + text, nl=end, err=err)
        self._open = None if end else err

    def _close(self) -> None:
        if self._open is not None:
            typer.echo(err=self._open)
            self._open = None

    def _summary(self, event: AgentEvent) -> None:
        parts = [f"state: {event.state}"] if event.state else []
        if event.model:
            parts.append(f"model: {event.model}")
        if event.iterations is not None:
            parts.append(f"{event.iterations} iteration{'s' * (event.iterations != 1)}")
        if event.usage is not None:
            parts.append(f"{event.usage.input_tokens}+{event.usage.output_tokens} tokens")
        if event.session:
            parts.append(f"continue with --session {event.session}")
        if parts:
            summary = typer.style(f"[{' · '.join(parts)}]", dim=True)
            typer.echo(self.indent + summary, err=True)
