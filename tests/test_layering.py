"""The import rules of STYLE.md §1, checked on the source of every module under tensorforge/.

Imports go one way: te -> ir -> schedule; codegen reads the IR; runtime sees only compiled
kernels (codegen.base's KernelSource); build wires them; ops (each operator's computation,
schedules and template) registers into tune, so tune does not import ops (except to trigger
that registration); nothing else imports tune or ops but graph and the command line. graph
(torch.compile) sits above them all; only the command line imports it. errors, target and
te.dtype are leaves anyone may import.
pycuda is imported only by runtime/cuda_* modules (and lazily, inside a function, by target.py
and runtime/device.py to see whether a GPU exists), so tensorforge imports without a GPU.
Imports under `if TYPE_CHECKING:` are type hints, not dependencies, and are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = next(
    (p for p in (ROOT / "src" / "tensorforge", ROOT / "tensorforge") if p.is_dir()), None
)

LEAVES = {
    "errors",
    "target",
    "te.dtype",
    "tvm_names",
}  # importable from anywhere; import only each other
LAYERS = {"te", "ir", "schedule", "codegen", "runtime", "tune", "ops", "testing", "tir", "graph"}
COMMANDS = {"cli", "bench", "demo", "info", "__main__"}  # the command line: `tensorforge info`, ...
TOP_LEVEL = {"build", "nd"} | COMMANDS
EVERYTHING = LAYERS | TOP_LEVEL | {"package", "codegen.base"}

# What each part of the package may import, besides itself and the leaves.
ALLOWED = {
    "errors": set(),
    "target": set(),
    "te.dtype": set(),
    "tvm_names": set(),
    "te": set(),
    "tir": {"te", "ir"},
    "ir": {"te"},
    "schedule": {"te", "ir"},
    "codegen": {"te", "ir", "codegen.base"},
    "codegen.base": {"te", "ir", "codegen"},
    "runtime": {"codegen.base"},
    "build": {"te", "ir", "schedule", "codegen", "codegen.base", "runtime", "nd"},
    "nd": {"runtime"},
    "package": {"te", "ir", "schedule", "codegen", "codegen.base", "runtime", "build", "nd"},
    "testing": {
        "te",
        "ir",
        "schedule",
        "codegen",
        "codegen.base",
        "runtime",
        "build",
        "nd",
        "package",
    },
    "tune": EVERYTHING - {"ops", "graph"} - COMMANDS,
    "ops": EVERYTHING - {"graph"} - COMMANDS,
    "graph": EVERYTHING - COMMANDS,  # above ops: torch.compile's graph layer
    **{command: EVERYTHING for command in COMMANDS},
}
# (file, imported part) -> why this one import inside a function is allowed.
FUNCTION_LEVEL_EXCEPTIONS = {
    ("te/__init__.py", "schedule"): "te.create_schedule: the one lazy upward reference",
    ("tune/builtin.py", "ops"): "get_template imports ops so its operators register templates",
}
PYCUDA_IN_FUNCTIONS = {"target.py", "runtime/device.py"}  # existence checks only


def part_of_file(relative: str) -> str:
    """'runtime/module.py' -> 'runtime', 'te/dtype.py' -> 'te.dtype', '__init__.py' -> 'package'."""
    if relative in ("te/dtype.py", "codegen/base.py"):
        return relative[:-3].replace("/", ".")
    head = relative.split("/")[0]
    if head == "__init__.py":
        return "package"
    return head.removesuffix(".py")


def part_of_module(module: str) -> str | None:
    """'tensorforge.te.expr.Var' -> 'te'; None for modules outside tensorforge."""
    names = module.split(".")
    if names[0] != "tensorforge":
        return None
    if len(names) == 1:
        return "package"
    dotted = ".".join(names[1:3])
    if dotted in ("te.dtype", "codegen.base"):
        return dotted
    if names[1] in LAYERS | TOP_LEVEL | {"errors", "target", "tvm_names"}:
        return names[1]
    return "package"  # `from tensorforge import ArgumentError`: a name from the package itself


def imports_of(tree: ast.Module, package: str) -> list[tuple[str, int, bool]]:
    """(module imported, line, inside a function?) for each import, TYPE_CHECKING blocks aside.

    `from X import a` yields "X.a": a submodule or a name of X, in X's part either way.
    """
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, package)
            found.extend((f"{base}.{alias.name}", node.lineno, in_function) for alias in node.names)
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def check_source(relative: str, text: str) -> list[str]:
    """Every layering violation in the file at `relative` (to the package root) holding `text`."""
    part = part_of_file(relative)
    if part not in ALLOWED:
        test_file = Path(__file__).name
        return [f"{relative}: belongs to no layer ({part!r}); add it to ALLOWED in {test_file}"]
    # the package relative imports start from: runtime/module.py and runtime/__init__.py -> runtime
    package = ".".join(["tensorforge", *relative[:-3].split("/")[:-1]])
    allowed = ALLOWED[part] | LEAVES | {part}
    is_cuda_module = relative.startswith("runtime/cuda_")
    violations = []
    for module, line, in_function in imports_of(ast.parse(text), package):
        where = f"{relative}:{line}"
        if module.split(".")[0] == "pycuda":
            if is_cuda_module or (in_function and relative in PYCUDA_IN_FUNCTIONS):
                continue
            place = "inside a function" if in_function else "at module level"
            violations.append(
                f"{where}: imports pycuda ({place}); pycuda belongs in runtime/cuda_* modules only"
            )
            continue
        if (
            module.startswith("tensorforge.runtime.cuda_")
            and not in_function
            and not is_cuda_module
        ):
            violations.append(
                f"{where}: imports {module} at module level; runtime/cuda_* modules "
                f"(pycuda) must be imported lazily, inside a function"
            )
        target = part_of_module(module)
        if target is None or target in allowed:
            continue
        if in_function and (relative, target) in FUNCTION_LEVEL_EXCEPTIONS:
            continue
        permitted = ", ".join(sorted(allowed - {part})) or "nothing"
        violations.append(
            f"{where}: {part} may not import {module} ({target}); {part} may import: {permitted}"
        )
    return violations


def _resolve(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


SOURCE_FILES = sorted(PACKAGE.rglob("*.py")) if PACKAGE else []


def test_package_found():
    assert SOURCE_FILES, f"no tensorforge sources under {ROOT}"


@pytest.mark.parametrize("path", SOURCE_FILES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_follow_the_layers(path):
    relative = path.relative_to(PACKAGE).as_posix()
    violations = check_source(relative, path.read_text())
    assert not violations, "layering violations (STYLE.md §1):\n  " + "\n  ".join(violations)


# -- the checker itself catches what it should ---------------------------------------------------
@pytest.mark.parametrize(
    "relative, text, expected",
    [
        ("runtime/module.py", "from tensorforge.ir.stmt import For", "runtime may not import"),
        ("runtime/module.py", "from tensorforge.codegen.llvm import X", "runtime may not import"),
        ("runtime/module.py", "from tensorforge.te.expr import Var", "runtime may not import"),
        ("te/expr.py", "from tensorforge.ir import stmt", "te may not import"),
        ("te/expr.py", "def f():\n    from tensorforge.schedule import x", "te may not import"),
        ("ir/stmt.py", "from tensorforge.schedule.stage import Stage", "ir may not import"),
        ("schedule/stage.py", "import tensorforge.codegen", "schedule may not import"),
        ("codegen/llvm.py", "from tensorforge.runtime import Module", "codegen may not import"),
        ("build.py", "from tensorforge.tune import space", "build may not import"),
        ("__init__.py", "from tensorforge.ops import matmul", "package may not import"),
        ("tune/measure.py", "from tensorforge.ops import matmul", "tune may not import"),
        ("tune/builtin.py", "import tensorforge.ops", "tune may not import"),
        ("ops/matmul.py", "from tensorforge.cli import main", "ops may not import"),
        ("ir/pipeline.py", "from ..schedule import loops", "ir may not import"),
        ("runtime/module.py", "import pycuda.driver", "pycuda belongs"),
        ("target.py", "import pycuda.driver as cuda", "pycuda belongs"),
        ("codegen/cuda.py", "def f():\n    import pycuda", "pycuda belongs"),
        ("runtime/module.py", "from tensorforge.runtime.cuda_exec import E", "imported lazily"),
        ("misc.py", "", "belongs to no layer"),
        ("ops/matmul.py", "from tensorforge.graph import backend", "ops may not import"),
        ("tune/cli.py", "from tensorforge.graph import backend", "tune may not import"),
    ],
)
def test_checker_flags_violations(relative, text, expected):
    assert any(expected in v for v in check_source(relative, text))


@pytest.mark.parametrize(
    "relative, text",
    [
        ("runtime/module.py", "from tensorforge.codegen.base import KernelSource"),
        ("runtime/module.py", "from tensorforge.te.dtype import SCALAR_DTYPES"),
        ("runtime/module.py", "from tensorforge.target import Target\nfrom .device import cpu"),
        ("runtime/module.py", "def f():\n    from tensorforge.runtime.cuda_exec import E"),
        ("runtime/cuda_exec.py", "import pycuda.driver as cuda"),
        ("runtime/device.py", "def f():\n    import pycuda.driver"),
        ("target.py", "def f():\n    import pycuda.driver\n    from tensorforge.te.dtype import b"),
        (
            "te/__init__.py",
            "def create_schedule():\n    from tensorforge.schedule.schedule import c",
        ),
        (
            "codegen/base.py",
            "import typing\nif typing.TYPE_CHECKING:\n    from tensorforge.ir.stmt import PrimFunc",
        ),
        ("runtime/module.py", "if TYPE_CHECKING:\n    from tensorforge.ir.stmt import PrimFunc"),
        ("cli.py", "from tensorforge import tune, ops"),
        ("tune/measure.py", "import tensorforge as tf\nfrom tensorforge.tune import space"),
        ("tune/builtin.py", "def register():\n    import tensorforge.ops"),
        (
            "ops/matmul.py",
            "from tensorforge import tune, te\nfrom tensorforge.tune import get_config",
        ),
        ("nd.py", "from tensorforge.runtime.ndarray import NDArray"),
    ],
)
def test_checker_allows_the_rules(relative, text):
    assert check_source(relative, text) == []
