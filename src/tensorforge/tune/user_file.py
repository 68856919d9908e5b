"""The CLI's `FILE.py:NAME` arguments (`--template`, `--auto`, `--torch`): load the user's file as
a module of its own and give back the module and the name asked for."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any


def load_user_file(
    spec: str, option: str, expected: str, module_prefix: str, error: type[Exception]
) -> tuple[Any, str, str]:
    """`path/to/file.py:name` -> (the file run as a module, path, name). A malformed `spec` or a
    missing file raises `error` naming `option` and the form it `expected`."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path:
        raise error(f"{option} expects {expected}, got {spec!r}")
    if not os.path.isfile(path):
        raise error(f"{option}: no such file {path!r}")
    module_name = module_prefix + os.path.splitext(os.path.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)
    return module, path, name
