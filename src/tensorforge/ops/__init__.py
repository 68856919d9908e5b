"""tensorforge.ops: a small operator library, each with a fast default CPU schedule."""

from tensorforge.ops.elementwise import fused_chain, schedule_elementwise
from tensorforge.ops.matmul import matmul, schedule_matmul

__all__ = ["matmul", "schedule_matmul", "fused_chain", "schedule_elementwise"]
