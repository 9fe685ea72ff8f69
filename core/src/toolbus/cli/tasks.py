"""``toolbus tasks list|show|answer|cancel``: calls that run as tasks, from the command line.

Tasks are kept in the state store the doors share (``state`` in
``toolbus.toml``, or ``TOOLBUS_STATE``), sealed with the doors' seal keys; these
commands read and write it with the same keys. Whoever runs them proves who
they are with their API key (``TOOLBUS_API_KEY``, checked against
``[credentials]``) and sees their own tasks; operators (the users in
``console-users`` of ``[gateway]``, else those allowed ``"*"`` in
``[permissions]``) may show and cancel anyone's. A task whose tool asks its
caller is answered by its owner only (``answer``): at the terminal, question by
question, or with the answers as JSON.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import anyio
import typer

from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.tasks import TaskBook, fitting_answers
from toolbus.cli._app import app
from toolbus.cli._door_state import StateOption, authenticated_user, door_state, with_store
from toolbus.cli._help import CommandApp
from toolbus.cli._prompting import TerminalRelay
from toolbus.cli.plugin_api import VerboseOption, fail, setup_logging
from toolbus.domain.calls.input_requests import (
    InputAsk,
    answer_to_json,
    describe,
    request_from_json,
)
from toolbus.domain.errors import TaskClosed, TaskNotAsking, TaskNotFound, UnfitAnswers, WireError
from toolbus.domain.tasks import Task
from toolbus.ports import StateStore
from toolbus.settings import Settings

DOOR = "toolbus tasks"
NO_STORE = (
    "no state store is configured: tasks are kept in the store the doors share; name it "
    'with state = "nats://..." (or redis://...) in toolbus.toml, TOOLBUS_STATE or --state. '
    "A door without one keeps its tasks in its own memory: read them with its API (the "
    "gateway's /v1/tasks)"
)
#: Characters of a result shown in a listing.
SHOWN = 60

tasks_app = CommandApp(
    name="tasks",
    no_args_is_help=True,
    help="Calls that run as tasks: list yours, show one, answer what one asks, cancel one.",
)
app.add_typer(tasks_app)

IdArgument = Annotated[str, typer.Argument(help="The task's id.", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def is_operator(settings: Settings, user: str) -> bool:
    """Operators, as the gateway's console has them: ``console-users`` of ``[gateway]``,
    else the users allowed ``"*"`` in ``[permissions]``."""
    gateway = settings.file.get("gateway")
    if isinstance(gateway, dict) and isinstance(gateway.get("console-users"), list):
        return user in gateway["console-users"]
    permissions = settings.file.get("permissions")
    if not isinstance(permissions, dict):
        return False
    users = permissions.get("users")
    groups: Any = users.get(user) if isinstance(users, dict) else None
    if groups is None:
        groups = permissions.get("fallback")
    return isinstance(groups, list) and "*" in groups


def summary(task: Task, now: float) -> str:
    """One line: id, status, tool, and what it waits for or came to."""
    age = max(0, int(now - task.created_at))
    if task.status == "input-required":
        detail = task.message or "waiting"
    elif task.error is not None:
        detail = f"{task.error.type}: {task.error.message}"
    elif task.result is not None:
        detail = task.result if len(task.result) <= SHOWN else task.result[:SHOWN] + "…"
    else:
        detail = task.message or ""
    return f"{task.id}  {task.status:<14}  {task.tool}  {age} s ago  {detail}".rstrip()


@tasks_app.command("list")
def list_tasks(
    state: StateOption = None, as_json: JsonOption = False, verbose: VerboseOption = False
) -> None:
    """List your tasks still kept, newest first (you are whoever TOOLBUS_API_KEY is the
    key of)."""
    setup_logging(verbose)
    where = door_state(state, door=DOOR, missing=NO_STORE)
    user = authenticated_user(where.settings, who="callers")
    found = with_store(where, "tasks", lambda store: TaskBook(store).of_owner(user))
    if as_json:
        for task in found:
            typer.echo(_json(task))
        return
    if not found:
        typer.echo("You have no task.")
        return
    now = time.time()
    for task in found:
        typer.echo(summary(task, now))


@tasks_app.command("show")
def show(
    task_id: IdArgument,
    state: StateOption = None,
    as_json: JsonOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Show one of your tasks (an operator: anyone's): its status, and its result or error
    once it ended."""
    setup_logging(verbose)
    where = door_state(state, door=DOOR, missing=NO_STORE)
    user = authenticated_user(where.settings, who="callers")
    operator = is_operator(where.settings, user)

    async def read(store: StateStore) -> Task:
        task = await TaskBook(store).get(task_id)
        if task is None or not (operator or task.owner == user):
            fail(str(TaskNotFound(task_id)))
        return task

    task = with_store(where, "tasks", read)
    if as_json:
        typer.echo(_json(task))
        return
    typer.echo(summary(task, time.time()))
    if task.result is not None and len(task.result) > SHOWN:
        typer.echo(task.result)
    for key, written in (task.input_requests or {}).items():
        try:
            typer.echo(f"asks {key}: {describe({key: request_from_json(written)})}")
        except WireError:
            typer.echo(f"asks {key}: {json.dumps(written, ensure_ascii=False)}")


@tasks_app.command("answer")
def answer(
    task_id: IdArgument,
    responses: Annotated[
        str | None,
        typer.Option(
            "--responses",
            metavar="JSON",
            help='The answers by key, as MCP\'s client writes them: \'{"KEY": {"action": '
            '"accept", "content": {...}}}\'. Without it, each question is asked here.',
            show_default=False,
        ),
    ] = None,
    state: StateOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Answer what the tool of one of your tasks asks (input-required): the task goes on
    once every question is answered, on whichever replica makes its call."""
    setup_logging(verbose)
    given = None if responses is None else _responses(responses)
    where = door_state(state, door=DOOR, missing=NO_STORE)
    user = authenticated_user(where.settings, who="callers")

    async def owned(store: StateStore) -> Task:
        task = await TaskBook(store).get(task_id)
        if task is None or task.owner != user:
            fail(str(TaskNotFound(task_id)))
        return task

    if given is None:
        # Asked with the store closed: a person may take their time.
        given = _asked_here(with_store(where, "tasks", owned))

    async def answered(store: StateStore) -> Task:
        book = TaskBook(store)
        task = await owned(store)
        try:
            fitting = fitting_answers(task, given)
            now = book.clock()
            return await book.change(task_id, lambda task: task.answered(now, fitting))
        except (TaskClosed, TaskNotAsking, TaskNotFound, UnfitAnswers) as exc:
            fail(str(exc))

    task = with_store(where, "tasks", answered)
    left = sorted(task.input_requests or {})
    if left:
        typer.echo(f"answered; task {task.id} still asks {', '.join(left)}")
    else:
        typer.echo(f"answered; task {task.id} goes on")


def _responses(text: str) -> dict[str, Any]:
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--responses is not JSON ({exc}); give the answers by key as a JSON object")
    if not isinstance(given, dict) or not given:
        fail('--responses must be a JSON object of answers by key, e.g. {"KEY": {...}}')
    return given


def _asked_here(task: Task) -> dict[str, Any]:
    """The answers the person at the terminal gives to what the task asks."""
    if task.final or not task.input_requests:
        return {}  # fitting_answers says why there is nothing to answer
    try:
        asked = InputAsk.from_json({"requests": task.input_requests})
    except WireError as exc:
        fail(f"task {task.id} asks what this command cannot show ({exc}); use --responses")
    answers = anyio.run(TerminalRelay().answer, asked)
    return {key: answer_to_json(value) for key, value in answers.items()}


@tasks_app.command("cancel")
def cancel(task_id: IdArgument, state: StateOption = None, verbose: VerboseOption = False) -> None:
    """Cancel one of your tasks (an operator: anyone's): the replica making its call stops
    it within seconds, and the approval it waits for is withdrawn."""
    setup_logging(verbose)
    where = door_state(state, door=DOOR, missing=NO_STORE)
    user = authenticated_user(where.settings, who="callers")
    operator = is_operator(where.settings, user)

    async def cancelled(store: StateStore) -> Task:
        book = TaskBook(store)
        before = await book.get(task_id)
        if before is None or not (operator or before.owner == user):
            fail(str(TaskNotFound(task_id)))
        now = book.clock()
        try:
            task = await book.change(
                task_id, lambda task: task.moved(now, "cancelled", message=f"cancelled by {user}")
            )
        except (TaskClosed, TaskNotFound) as exc:
            fail(str(exc))
        if before.approval_id is not None:
            await ApprovalBook(store).withdraw(
                before.approval_id, f"its task was cancelled by {user}"
            )
        return task

    task = with_store(where, "tasks", cancelled)
    typer.echo(f"cancelled: {task.tool} for {task.owner} ({task.id})")


def _json(task: Task) -> str:
    return json.dumps(task.view(), ensure_ascii=False)
