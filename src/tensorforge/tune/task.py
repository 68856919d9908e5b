"""AutoTVM's `autotvm.task` spellings: `tune.task.create(name, args, target)` and the classes."""

from __future__ import annotations

from tensorforge.tune.space import ConfigEntity, ConfigSpace
from tensorforge.tune.template import Task, get_config, template
from tensorforge.tune.template import create_task as create

__all__ = ["ConfigEntity", "ConfigSpace", "Task", "create", "get_config", "template"]


def __getattr__(name: str):
    from tensorforge.tvm_names import TASK, missing

    raise missing("tensorforge.tune.task", name, TASK, globals())
