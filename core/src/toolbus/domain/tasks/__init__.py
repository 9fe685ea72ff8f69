"""Calls that wait, as data: tasks (:mod:`toolbus.domain.tasks.model`)."""

from toolbus.domain.tasks.model import (
    DEFAULT_TTL,
    FINAL,
    Task,
    TaskCall,
    TaskError,
    TaskStatus,
)
from toolbus.domain.tasks.settings import TaskSettings, parse_task_settings

__all__ = [
    "DEFAULT_TTL",
    "FINAL",
    "Task",
    "TaskCall",
    "TaskError",
    "TaskSettings",
    "TaskStatus",
    "parse_task_settings",
]
