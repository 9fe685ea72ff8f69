"""Calls that wait, as tasks any replica answers for.

* :class:`~toolbus.application.tasks.book.TaskBook`: where tasks are kept (the
  door's state store, sealed when shared);
* :class:`~toolbus.application.tasks.runner.TaskRunner`: runs a door's calls as
  tasks in the background, and goes on with those a stopped replica left;
* :class:`~toolbus.application.tasks.asking.TaskInputRelay`: what a task's tool
  asks its caller waits in the task until answered (every door's way).

See docs/tasks.md.
"""

from toolbus.application.tasks.asking import (
    TaskInputRelay,
    fitting_answers,
    task_continuation,
    task_kinds,
)
from toolbus.application.tasks.book import TaskBook
from toolbus.application.tasks.runner import (
    TaskEnd,
    TaskProgress,
    TaskRunner,
    new_task_id,
)

__all__ = [
    "TaskBook",
    "TaskEnd",
    "TaskInputRelay",
    "TaskProgress",
    "TaskRunner",
    "fitting_answers",
    "new_task_id",
    "task_continuation",
    "task_kinds",
]
