"""AutoTVM's `autotvm.callback` spellings: `tune.callback.log_to_file(path)`, `progress_bar`."""

from tensorforge.tune.callbacks import log_to_file, progress_bar

__all__ = ["log_to_file", "progress_bar"]
