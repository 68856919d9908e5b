"""tensorforge.tune: templates, config spaces, measurement, tuners and logs (API.md §4)."""

from tensorforge.tune import callback, task, tuner
from tensorforge.tune.autotvm_compat import LocalBuilder, LocalRunner
from tensorforge.tune.callbacks import log_to_file, progress_bar
from tensorforge.tune.measure import (
    MeasureErrorNo,
    MeasureInput,
    MeasureOption,
    MeasureResult,
    measure_option,
)
from tensorforge.tune.ray_runner import RayRunner
from tensorforge.tune.records import Record, apply_history_best, load_records
from tensorforge.tune.space import ConfigEntity, ConfigSpace
from tensorforge.tune.template import Task, TuneError, create_task, get_config, template
from tensorforge.tune.tuner import GridSearchTuner, RandomTuner, Tuner, XGBTuner

__all__ = [
    "ConfigEntity",
    "LocalBuilder",
    "LocalRunner",
    "callback",
    "task",
    "tuner",
    "ConfigSpace",
    "GridSearchTuner",
    "MeasureErrorNo",
    "MeasureInput",
    "MeasureOption",
    "MeasureResult",
    "RandomTuner",
    "RayRunner",
    "Record",
    "Task",
    "TuneError",
    "Tuner",
    "XGBTuner",
    "apply_history_best",
    "create_task",
    "get_config",
    "load_records",
    "log_to_file",
    "measure_option",
    "progress_bar",
    "template",
]


def __getattr__(name: str):
    from tensorforge.tvm_names import TUNE, missing

    raise missing("tensorforge.tune", name, TUNE, globals())
