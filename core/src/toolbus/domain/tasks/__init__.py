"""Calls that wait, as data: tasks (:mod:`toolbus.domain.tasks.model`)."""

from toolbus.domain.tasks.model import (
    DEFAULT_TTL,
    FINAL,
    Task,
    TaskCall,
    TaskError,
    TaskStatus,
)

__all__ = ["DEFAULT_TTL", "FINAL", "Task", "TaskCall", "TaskError", "TaskStatus"]
