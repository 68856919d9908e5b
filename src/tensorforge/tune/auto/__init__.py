"""tensorforge.tune.auto: schedules without templates (API.md §8).

Sketch rules derive the schedules a computation admits (sketch.py), decisions fill them in
(decisions.py), a schedule is the trace of primitive calls that made it (trace.py), the analytic
model of the target takes a first guess with no measurement (analytic.py), the evolutionary search
improves on it with measurements (search.py, tuning.py), and the task scheduler shares trials
among many kernels (scheduler.py).
"""

from tensorforge.tune.auto.scheduler import TaskScheduler
from tensorforge.tune.auto.task import (
    ScheduleTrace,
    SearchTask,
    get_workload,
    register_workload,
)
from tensorforge.tune.auto.trace import Step

__all__ = [
    "ScheduleTrace",
    "SearchTask",
    "Step",
    "TaskScheduler",
    "get_workload",
    "register_workload",
]
