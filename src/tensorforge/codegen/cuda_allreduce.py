"""ThreadAllReduce as CUDA C: warp shuffles within warps, shared memory across them.

The reduction runs over the threads along one tag (`threadIdx.x`, say), separately for each
group of threads that share the other thread indices. Three strategies, picked from the launch:

- "warp": the reduced threads of a group sit in one warp (x-axis, at most 32 of them, a power of
  two or a single group): shuffle down to the group's first lane, then broadcast.
- "warps+shared": x-axis, groups made of whole warps (or one group): shuffle within each warp,
  one partial per warp in shared memory, then combine the partials.
- "shared-tree": anything else (y/z axes, groups straddling warps): a tree in shared memory.

Threads at or beyond `extent` (and threads a pushed-down guard turns off) contribute the
identity. The left operand of every combine comes from the lower thread index, so a reducer that
breaks ties by its left side (argmax keeping the first index) gives the same answer as a scan.
Every thread ends with the combined tuple in the `results` buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorforge.codegen.cuda_expr import ctype
from tensorforge.errors import BuildError
from tensorforge.ir.stmt import ThreadAllReduce
from tensorforge.te import dtype as dt

if TYPE_CHECKING:
    from tensorforge.codegen.cuda import _KernelWriter

_SMALL_INTS = {"bool", "signed char", "short", "unsigned char", "unsigned short"}


@dataclass(frozen=True)
class AllReducePlan:
    strategy: str  # "none" | "warp" | "warps+shared" | "shared-tree"
    scratch: int  # shared-memory elements per reduced value


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n & (n - 1) == 0


def plan_allreduce(s: ThreadAllReduce, block: tuple[int, int, int]) -> AllReducePlan:
    if not s.thread_tag.startswith("threadIdx."):
        raise BuildError(
            f"ThreadAllReduce over {s.thread_tag}: only threadIdx.x/y/z can be reduced"
        )
    axis = "xyz".index(s.thread_tag[-1])
    width = block[axis]
    if s.extent > width:
        raise BuildError(
            f"ThreadAllReduce over {s.thread_tag} has extent {s.extent}, but the kernel launches "
            f"only {width} threads along it (bind a loop of that extent to {s.thread_tag})"
        )
    total = block[0] * block[1] * block[2]
    groups = total // width
    if width == 1:
        return AllReducePlan("none", 0)
    if axis == 0 and width <= 32 and (_is_pow2(width) or groups == 1):
        return AllReducePlan("warp", 0)
    if axis == 0 and (width % 32 == 0 or groups == 1):
        return AllReducePlan("warps+shared", -(-width // 32) * groups)
    return AllReducePlan("shared-tree", total)


def emit_allreduce(w: _KernelWriter, s: ThreadAllReduce) -> None:
    plan = w.allreduce_plans[id(s)]
    block = w.threads.launch.block
    axis = s.thread_tag[-1]
    width = block["xyz".index(axis)]
    total = block[0] * block[1] * block[2]
    c = s.combiner
    n = len(s.values)
    if len(c.lhs) != n or len(s.results) != n:
        raise BuildError(f"ThreadAllReduce({c.name}): {n} values for a {len(c.lhs)}-value reducer")
    types = [ctype(v.dtype) for v in s.values]
    p = w.printer
    fresh = w.names.fresh

    w.line(
        f"// ThreadAllReduce({c.name}) over {s.thread_tag}: {s.extent} of {width} threads, {plan.strategy}"
    )
    w.open("{")
    tid = _linear_tid(block)
    r = f"(int)threadIdx.{axis}"
    conditions = [f"{r} < {s.extent}"] if s.extent < width else []
    if s.condition is not None:
        conditions.append(p(s.condition))
    vs = [fresh(f"red_{c.name}{i}") for i in range(n)]
    identity = [p(x) for x in c.identity]
    if conditions:
        act = fresh("red_active")
        w.line(f"const bool {act} = {' && '.join(conditions)};")
        for v, t, value, ident in zip(vs, types, s.values, identity):
            w.line(f"{t} {v} = {act} ? ({t})({p(value)}) : {ident};")
    else:
        for v, t, value in zip(vs, types, s.values):
            w.line(f"{t} {v} = {p(value)};")

    def combine(dst: list[str], src: list[str]) -> list[str]:
        for var, name in zip(c.lhs + c.rhs, dst + src):
            w.names.bind(var, name)
        try:
            results = [p(x) for x in c.result]
        finally:
            for var in c.lhs + c.rhs:
                w.names.unbind(var)
        if n == 1:
            return [f"{dst[0]} = {results[0]};"]
        temps = [fresh("red_new") for _ in range(n)]
        return [f"const {t} {x} = {res};" for t, x, res in zip(types, temps, results)] + [
            f"{d} = {x};" for d, x in zip(dst, temps)
        ]

    def shuffle(kind: str, mask: str, value: str, t: str, arg: str, lanes: int) -> str:
        fn = f"__shfl_{kind}_sync" if kind else "__shfl_sync"
        if t in _SMALL_INTS:
            return f"({t}){fn}({mask}, (int){value}, {arg}, {lanes})"
        return f"{fn}({mask}, {value}, {arg}, {lanes})"

    def warp_reduce(mask: str, count: int, lanes: int, lane: str, valid: str | None) -> None:
        """Combine `count` values spread over `lanes`-wide segments into each segment's lane 0."""
        off = _next_pow2(count) // 2
        while off >= 1:
            others = [fresh("red_other") for _ in range(n)]
            for o, v, t in zip(others, vs, types):
                w.line(f"const {t} {o} = {shuffle('down', mask, v, t, str(off), lanes)};")
            body = combine(vs, others)
            if valid is not None:
                w.open(f"if ({lane} + {off} < {valid}) {{")
                w.lines_(body)
                w.close("}")
            else:
                w.lines_(body)
            off //= 2

    def broadcast(mask: str, lanes: int) -> None:
        for v, t in zip(vs, types):
            w.line(f"{v} = {shuffle('', mask, v, t, '0', lanes)};")

    if plan.strategy == "warp":
        mask = fresh("red_mask")
        w.line(f"const unsigned {mask} = {_warp_mask(total, tid)};")
        lanes = width if _is_pow2(width) else 32
        warp_reduce(mask, width, lanes, r, None if _is_pow2(width) else str(width))
        broadcast(mask, lanes)
    elif plan.strategy == "warps+shared":
        warps = -(-width // 32)
        full = width % 32 == 0
        mask, lane, warp = fresh("red_mask"), fresh("red_lane"), fresh("red_warp")
        w.line(f"const int {lane} = {tid} & 31;")
        w.line(f"const int {warp} = {tid} >> 5;")
        w.line(f"const unsigned {mask} = {_warp_mask(total, tid)};")
        valid = None
        if not full:  # one group whose last warp is partial
            valid = fresh("red_valid")
            w.line(f"const int {valid} = {warp} == {warps - 1} ? {width - 32 * (warps - 1)} : 32;")
        warp_reduce(mask, 32, 32, lane, valid)
        scratch = [fresh(f"red_buf{i}") for i in range(n)]
        for i, (name, t) in enumerate(zip(scratch, types)):
            w.line(w.shared_decl((id(s), i), t, name, plan.scratch))
        w.open(f"if ({lane} == 0) {{")
        w.lines_([f"{b}[{warp}] = {v};" for b, v in zip(scratch, vs)])
        w.close("}")
        w.line("__syncthreads();")
        if full:
            first = fresh("red_first")
            w.line(f"const int {first} = ({warp} / {warps}) * {warps};")
            for b, v, ident in zip(scratch, vs, identity):
                w.line(f"{v} = {lane} < {warps} ? {b}[{first} + {lane}] : {ident};")
            warp_reduce("0xffffffffu", warps, 32, lane, None)
            broadcast("0xffffffffu", 32)
        else:
            for b, v in zip(scratch, vs):
                w.line(f"{v} = {b}[0];")
            k = fresh("red_w")
            w.open(f"for (int {k} = 1; {k} < {warps}; ++{k}) {{")
            others = [fresh("red_other") for _ in range(n)]
            w.lines_([f"const {t} {o} = {b}[{k}];" for t, o, b in zip(types, others, scratch)])
            w.lines_(combine(vs, others))
            w.close("}")
        w.line(
            "__syncthreads();  // the partials are read before any later reduction rewrites them"
        )
    elif plan.strategy == "shared-tree":
        stride = {"x": 1, "y": block[0], "z": block[0] * block[1]}[axis]
        scratch = [fresh(f"red_buf{i}") for i in range(n)]
        for i, (name, t) in enumerate(zip(scratch, types)):
            w.line(w.shared_decl((id(s), i), t, name, plan.scratch))
        me = fresh("red_tid")
        w.line(f"const int {me} = {tid};")
        w.lines_([f"{b}[{me}] = {v};" for b, v in zip(scratch, vs)])
        w.line("__syncthreads();")
        step = fresh("red_step")
        w.open(f"for (int {step} = {_next_pow2(width) // 2}; {step} > 0; {step} >>= 1) {{")
        w.open(f"if ({r} < {step} && {r} + {step} < {width}) {{")
        others = [fresh("red_other") for _ in range(n)]
        w.lines_(
            [
                f"const {t} {o} = {b}[{me} + {step} * {stride}];"
                for t, o, b in zip(types, others, scratch)
            ]
        )
        w.lines_(combine(vs, others))
        w.lines_([f"{b}[{me}] = {v};" for b, v in zip(scratch, vs)])
        w.close("}")
        w.line("__syncthreads();")
        w.close("}")
        w.lines_([f"{v} = {b}[{me} - {r} * {stride}];" for b, v in zip(scratch, vs)])
        w.line("__syncthreads();  // the tree is read before any later reduction rewrites it")
    for result, v in zip(s.results, vs):
        w.line(f"{w.names.buffer(result)}[0] = {v};")
    w.close("}")


def _linear_tid(block: tuple[int, int, int]) -> str:
    bx, by, bz = block
    text = "(int)threadIdx.x"
    if by > 1:
        text = f"{text} + {bx} * (int)threadIdx.y"
    if bz > 1:
        text = f"{text} + {bx * by} * (int)threadIdx.z"
    return f"({text})"


def _warp_mask(total: int, tid: str) -> str:
    """The lanes that exist in this thread's warp (the last warp of a block may be partial)."""
    if total % 32 == 0:
        return "0xffffffffu"
    partial = f"{(1 << (total % 32)) - 1}u"
    if total < 32:
        return partial
    return f"(({tid} >> 5) == {total // 32} ? {partial} : 0xffffffffu)"


def scratch_bytes(s: ThreadAllReduce, plan: AllReducePlan) -> list[int]:
    return [plan.scratch * max(1, dt.bits_of(v.dtype) // 8) for v in s.values]
