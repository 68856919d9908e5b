"""A small tir.ir_builder: collects the calls a te.extern fcompute or a tensor intrinsic's
fintrin emits (`ib = tf.tir.ir_builder.create(); ib.emit(call); return ib.get()`)."""

from __future__ import annotations

from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te.extern_call import ExternCall
from tensorforge.tvm_names import MissingNameError


class IRBuilder:
    """Records emitted calls, in order; `get()` returns them for te.extern / tensorize."""

    def __init__(self) -> None:
        self.calls: list[ExternCall] = []

    def emit(self, call: Any) -> None:
        if not isinstance(call, ExternCall):
            raise ExprError(
                f"ir_builder.emit: only calls (tf.tir.call_extern / call_packed / "
                f"call_llvm_pure_intrin) can be emitted here, got {call!r}; loops and stores are "
                f"written with te.compute"
            )
        self.calls.append(call)

    def get(self) -> IRBuilder:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise MissingNameError(
            f"ir_builder.{name} is not provided: this builder only collects calls (ib.emit); "
            f"write loops and stores with te.compute"
        )


def create() -> IRBuilder:
    return IRBuilder()
