"""tensorforge.tune: templates, config spaces, measurement, tuners and logs (API.md §4)."""

from tensorforge.tune.callbacks import log_to_file, progress_bar
from tensorforge.tune.measure import (
    MeasureErrorNo,
    MeasureInput,
    MeasureOption,
    MeasureResult,
    measure_option,
)
from tensorforge.tune.records import Record, apply_history_best, load_records
from tensorforge.tune.space import ConfigEntity, ConfigSpace
from tensorforge.tune.template import Task, TuneError, create_task, get_config, template
from tensorforge.tune.tuner import GridSearchTuner, RandomTuner, Tuner, XGBTuner

__all__ = [
    "template",
    "get_config",
    "create_task",
    "Task",
    "ConfigSpace",
    "ConfigEntity",
    "measure_option",
    "MeasureOption",
    "MeasureInput",
    "MeasureResult",
    "MeasureErrorNo",
    "Tuner",
    "RandomTuner",
    "GridSearchTuner",
    "XGBTuner",
    "log_to_file",
    "progress_bar",
    "apply_history_best",
    "load_records",
    "Record",
    "TuneError",
]
