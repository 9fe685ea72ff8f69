"""Calls that wait, as tasks any replica answers for.

* :class:`~toolbus.application.tasks.book.TaskBook`: where tasks are kept (the
  door's state store, sealed when shared);
* :class:`~toolbus.application.tasks.runner.TaskRunner`: runs a door's calls as
  tasks in the background, and goes on with those a stopped replica left.

See docs/tasks.md.
"""

from toolbus.application.tasks.book import TaskBook
from toolbus.application.tasks.runner import (
    TaskEnd,
    TaskProgress,
    TaskRunner,
    new_task_id,
)

__all__ = ["TaskBook", "TaskEnd", "TaskProgress", "TaskRunner", "new_task_id"]
