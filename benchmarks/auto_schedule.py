"""Auto-scheduling (tune.auto) against the ops library's hand schedules, on this CPU, 1 thread.

For each case: the hand schedule (or, for fused subgraphs, the best unfused pair of ops
schedules), NumPy where it has the operator, the analytic first guess (trials=0) and the best
schedule tuned so far (from a resumable log per case), all timed in this one process, as ratios.

Fused rows and their sizes. Fusing an element-wise consumer into its anchor (GEMM, conv) saves
the consumer's separate pass: a write and a read of the anchor's output, not its arithmetic. So
the gain over the unfused pair is at most (anchor + pass) / anchor, and (anchor + pass) / (anchor
+ the pass's arithmetic) where that arithmetic is not free: columns 'ceiling' and 'w/ math', from
the pair's parts timed alone ('math': the pass on rows that stay in cache); a MISS* row has a
ceiling under its target, which only a faster anchor (or faster math) could pass. Measured on Zen
5 ('znver5', AVX-512, 1 thread, load ~6, session 9): at GEMM 1024³ (the issue's size) and conv 64
-> 64 3x3 at 56² the anchor is 98% of the pair (ceilings 1.02x), so those rows show that fusion
costs nothing, not 1.2x; any ratio past that is the anchor's own. The rows labelled after them
are shapes of real models where the pass is a larger share: a transformer MLP's up-projection
(/mlp: BERT-base, 128 tokens, 768 -> 3072), an MLP layer on few input features (/smallk: 4096
rows, k = 64, as in NeRF-style MLPs), a ResNet bottleneck's 1x1 expansion (/1x1: 64 -> 256
channels at 56²) and a 3x3 at 14² x 256. GELU's arithmetic (erf one branch-free rational,
benchmarks/math_throughput.py) costs ~0.17 ns an element on this core, as much as its whole
separate pass from memory (0.18 of 0.19 ms at 4096 x 256): that pass is compute-bound, and
fusing it saves ~nothing (/smallk: ceiling 1.35x, w/ math 1.01x; first guess 0.96-0.99x, within
noise of it); faster GELU would speed up both. BN + ReLU is mostly memory traffic, so a cheap
anchor gains most: /1x1 ceiling 1.13x (w/ math 1.07x), first guess 1.08-1.10x. Add + layer norm
passes 1.2x by fusion (1.42x; the add is half its pair: ceiling 1.98x); the other fused rows
cannot reach it by fusion here. The anchors' own rows at those shapes (gemm/mlp, conv2d/1x1,
...) show how much of a fused row's ratio is the anchor's.
`--target 'llvm -mcpu=znver3'` compiles every schedule (hand and auto) for another CPU and runs
it here: a check that the first guess falls off no cliff on the other machines' facts.
`--search-quality N` compares the model-guided search (N/2 trials; with and without the first
guess in its first batch) with random search (N trials) on GEMM 256³, 3 seeds, kernels timed in
thread CPU time; the target's scale is N = 1000 (a smaller N is labelled a reduced scale).

Run: TF_NUM_THREADS=1 nice python benchmarks/auto_schedule.py [--tune N] [--cases a,b]
     [--logs DIR] [--small] [--target T] [--search-quality N [--sq-out FILE]] [--json]
Each `--tune N` adds N trials per case to its log (resumed), so a budget can be spent in slices.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # NumPy on 1 thread too (before it loads)
os.environ.setdefault("TF_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from auto_search_quality import print_search_quality, search_quality  # noqa: E402 (this folder)

import tensorforge as tf  # noqa: E402
from tensorforge import te, tune
from tensorforge.ops.conv2d import conv2d_nchw, schedule_conv2d
from tensorforge.ops.elementwise import schedule_elementwise
from tensorforge.ops.layer_norm import layer_norm, schedule_layer_norm
from tensorforge.ops.matmul import schedule_matmul
from tensorforge.ops.softmax import schedule_softmax, softmax
from tensorforge.tune import auto
from tensorforge.tune.auto import analytic, tuning

# -- workloads (the ops library's computations, and fused subgraphs it has no schedule for) -----


@auto.register_workload(name="bench/gemm")
def gemm(n, k, m):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    return [A, B, te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")]


def _gelu(x):
    return 0.5 * x * (1.0 + te.erf(x * 0.7071067811865476))


@auto.register_workload(name="bench/gemm_bias_gelu")
def gemm_bias_gelu(n, k, m):
    A, B, C = gemm(n, k, m)
    bias = te.placeholder((m,), name="bias")
    D = te.compute((n, m), lambda i, j: _gelu(C[i, j] + bias[j]), name="D")
    return [A, B, bias, D]


@auto.register_workload(name="bench/conv2d")
def conv2d(b, c, h, w, f, kernel=3, pad=1):
    data, weight, _, out = conv2d_nchw(b, c, h, w, f, kernel, pad)
    return [data, weight, out]


def _bn_relu(x, scale, shift):
    return te.compute(
        x.shape, lambda n, c, y, z: te.max(x[n, c, y, z] * scale[c] + shift[c], 0.0), name="bn"
    )


@auto.register_workload(name="bench/conv_bn_relu")
def conv_bn_relu(b, c, h, w, f, kernel=3, pad=1):
    data, weight, conv = conv2d(b, c, h, w, f, kernel, pad)
    scale = te.placeholder((f,), name="scale")
    shift = te.placeholder((f,), name="shift")
    return [data, weight, scale, shift, _bn_relu(conv, scale, shift)]


@auto.register_workload(name="bench/softmax")
def softmax_workload(n, m):
    return list(softmax(n, m))


@auto.register_workload(name="bench/layer_norm")
def layer_norm_workload(n, m):
    return list(layer_norm(n, m))


@auto.register_workload(name="bench/add_layer_norm")
def add_layer_norm(n, m):
    """Layer norm (as ops declares it) of a + residual, the add fused in."""
    a = te.placeholder((n, m), name="a")
    residual = te.placeholder((n, m), name="residual")
    gamma = te.placeholder((m,), name="gamma")
    beta = te.placeholder((m,), name="beta")
    added = te.compute((n, m), lambda i, j: a[i, j] + residual[i, j], name="add")
    k1 = te.reduce_axis((0, m), name="k1")
    k2 = te.reduce_axis((0, m), name="k2")
    total = te.compute((n,), lambda i: te.sum(added[i, k1], axis=k1), name="total")
    squares = te.compute(
        (n,), lambda i: te.sum(added[i, k2] * added[i, k2], axis=k2), name="squares"
    )

    def normalize(i, j):
        mean = total[i] * (1.0 / m)
        var = squares[i] * (1.0 / m) - mean * mean
        return (added[i, j] - mean) * te.rsqrt(var + 1e-5) * gamma[j] + beta[j]

    return [a, residual, gamma, beta, te.compute((n, m), normalize, name="y")]


# -- hand schedules (one kernel, or the unfused pair: two kernels run one after the other) --------


def _elementwise(shape, fcompute, n_inputs, name):
    ins = [te.placeholder(shape, name=f"in{k}") for k in range(n_inputs)]
    out = te.compute(shape, lambda *idx: fcompute(*[t[idx] for t in ins], *idx), name=name)
    return schedule_elementwise(out, parallel=False), [*ins, out]


def pass_kernel(case: str, shape: tuple) -> tuple:
    """The element-wise pass of a fused case's unfused pair at `shape` (its output's), as a
    plain loop: (schedule, tensors)."""
    case = case.split("/")[0]
    if case == "gemm_bias_gelu":
        bias = te.placeholder((shape[-1],), name="bias")
        c = te.placeholder(shape, name="C")
        d = te.compute(shape, lambda i, j: _gelu(c[i, j] + bias[j]), name="D")
        return plain_elementwise(d), [c, bias, d]
    if case == "conv_bn_relu":
        x = te.placeholder(shape, name="conv")
        scale = te.placeholder((shape[1],), name="scale")
        shift = te.placeholder((shape[1],), name="shift")
        y = _bn_relu(x, scale, shift)
        return plain_elementwise(y), [x, scale, shift, y]
    if case == "add_layer_norm":
        a, r = te.placeholder(shape, name="a"), te.placeholder(shape, name="residual")
        out = te.compute(shape, lambda i, j: a[i, j] + r[i, j], name="add")
        return plain_elementwise(out), [a, r, out]
    raise KeyError(case)


def output_shape(case: str, args: tuple) -> tuple:
    """The shape of a fused case's output (the element-wise pass's)."""
    base = case.split("/")[0]
    if base == "gemm_bias_gelu":
        return (args[0], args[2])
    if base == "conv_bn_relu":
        b, c, h, w, f, kernel, pad = (*args, 3, 1)[:7]
        return (b, f, h + 2 * pad - kernel + 1, w + 2 * pad - kernel + 1)
    return tuple(args)


def _shrunk(shape: tuple, elements: int) -> tuple:
    """`shape` with its outer axes cut to about `elements` elements (the inner ones whole)."""
    for d in range(len(shape)):
        inner = math.prod(shape[d + 1 :])
        if inner <= elements:
            return (1,) * d + (max(1, elements // inner),) + tuple(shape[d + 1 :])
    return shape


def pass_math_seconds(case: str, args: tuple, number: int, rounds: int, clock: str) -> float:
    """What the element-wise pass costs in arithmetic alone, from memory traffic aside: its
    plain loop on rows that stay in cache (16 K and 32 K elements: 64 + 64 KiB and twice that,
    in L2), the time per element of the difference (the call's fixed cost cancels) times the
    output's elements. Fusion saves the pass's memory traffic, not this."""
    shape = output_shape(case, args)
    small, large = _shrunk(shape, 16384), _shrunk(shape, 32768)
    if math.prod(large) <= math.prod(small):
        return 0.0
    kernels = {n: compile_kernels([pass_kernel(case, s)]) for n, s in (("s", small), ("l", large))}
    t = time_interleaved(kernels, number * 20, rounds, clock)
    per_element = max(0.0, (t["l"] - t["s"]) / (math.prod(large) - math.prod(small)))
    return per_element * math.prod(shape)


def hand(case: str, args: tuple) -> list[tuple]:
    """The ops schedules for `case`: a list of (schedule, tensors) run in sequence."""
    case = case.split("/")[0]  # "gemm_bias_gelu/mlp": the workload, at other sizes
    if case == "gemm":
        n, k, m = args
        return [schedule_matmul(n, m, k, parallel=False)]
    if case == "gemm_bias_gelu":
        n, k, m = args
        bias = te.placeholder((m,), name="bias")
        c = te.placeholder((n, m), name="C")
        d = te.compute((n, m), lambda i, j: _gelu(c[i, j] + bias[j]), name="D")
        return [
            schedule_matmul(n, m, k, parallel=False),
            (schedule_elementwise(d, parallel=False), [c, bias, d]),
        ]
    if case == "conv2d":
        return [schedule_conv2d(*args, parallel=False)]
    if case == "conv_bn_relu":
        b, c, h, w, f = args[:5]
        x = te.placeholder((b, f, h, w), name="conv")
        scale = te.placeholder((f,), name="scale")
        shift = te.placeholder((f,), name="shift")
        y = _bn_relu(x, scale, shift)
        return [
            schedule_conv2d(*args, parallel=False),
            (schedule_elementwise(y, parallel=False), [x, scale, shift, y]),
        ]
    if case == "softmax":
        return [schedule_softmax(*args, parallel=False)]
    if case == "layer_norm":
        return [schedule_layer_norm(*args, parallel=False)]
    if case == "add_layer_norm":
        n, m = args
        return [
            _elementwise((n, m), lambda a, r, i, j: a + r, 2, "add"),
            schedule_layer_norm(n, m, parallel=False),
        ]
    raise KeyError(case)


def plain_elementwise(out) -> object:
    """All loops fused, 32 elements a step as one vector: the simplest good element-wise loop."""
    s = te.create_schedule(out.op)
    fused = s[out].fuse(*s[out].op.axis)
    _, inner = s[out].split(fused, factor=32)
    s[out].vectorize(inner)
    return s


def hand_variants(case: str, args: tuple) -> dict:
    """The hand schedules to compare with: for a fused case, the ops pair and, since the ops
    element-wise schedule can lose to a plain loop on some shapes, the anchor with a plain
    element-wise loop (the faster of the two counts)."""
    kernels = hand(case, args)
    variants = {"hand": kernels}
    if len(kernels) == 2:
        elementwise_index = 1 if not case.startswith("add_layer_norm") else 0
        _, t_e = kernels[elementwise_index]
        plain = (plain_elementwise(t_e[-1]), t_e)
        other = kernels[1 - elementwise_index]
        variants["hand_plain"] = [other, plain] if elementwise_index else [plain, other]
    return variants


def numpy_reference(case: str, arrays: list[np.ndarray]):
    if case.split("/")[0] == "gemm":
        return lambda: np.matmul(arrays[0], arrays[1])
    if case == "softmax":
        x = arrays[0]

        def run():
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)

        return run
    return None


# name -> (workload, full-size args, small args). A fused case's gain over the unfused pair is
# at most (anchor + element-wise pass) / anchor: the pass it saves is a read and a write of the
# output. At GEMM 1024³ and conv 64 -> 64 3x3 the anchor is ~98% of the pair's time (a ceiling
# of ~1.02x on Zen 5); the rows after each label shapes of real models where the element-wise
# pass is a larger share: a transformer MLP's up-projection (BERT-base: 128 tokens, 768 -> 3072), a small
# reduction (an MLP on 64 input features, 4096 rows: NeRF-style), a ResNet bottleneck's 1x1
# expansion convolution (64 -> 256 channels at 56x56) and its 3x3 at 14x14 (256 channels).
CASES = {
    "gemm": (gemm, (1024, 1024, 1024), (128, 128, 128)),
    "conv2d": (conv2d, (1, 64, 56, 56, 64), (1, 8, 14, 14, 8)),
    "softmax": (softmax_workload, (4096, 4096), (256, 256)),
    "layer_norm": (layer_norm_workload, (4096, 4096), (256, 256)),
    # the anchors alone at the fused rows' other shapes: how much of a fused row's ratio is
    # the anchor's (at 14x14 x 256 both take 8 filters x a 16-lane vector whose last 2 lanes
    # are off: one FMA a row; until session 11 the first guess's 14-lane tile was 8 + 4 + 2
    # pieces, 0.86x, and ops' conv2d had 4 filters, 0.66x of 8)
    "gemm/mlp": (gemm, (128, 768, 3072), (16, 96, 384)),
    "gemm/smallk": (gemm, (4096, 64, 256), (512, 16, 64)),
    "conv2d/1x1": (conv2d, (1, 64, 56, 56, 256, 1, 0), (1, 8, 14, 14, 32, 1, 0)),
    "conv2d/14x14": (conv2d, (1, 256, 14, 14, 256), (1, 16, 7, 7, 16)),
    "gemm_bias_gelu": (gemm_bias_gelu, (1024, 1024, 1024), (128, 128, 128)),
    "gemm_bias_gelu/mlp": (gemm_bias_gelu, (128, 768, 3072), (16, 96, 384)),
    "gemm_bias_gelu/smallk": (gemm_bias_gelu, (4096, 64, 256), (512, 16, 64)),
    "conv_bn_relu": (conv_bn_relu, (1, 64, 56, 56, 64), (1, 8, 14, 14, 8)),
    "conv_bn_relu/1x1": (conv_bn_relu, (1, 64, 56, 56, 256, 1, 0), (1, 8, 14, 14, 32, 1, 0)),
    "conv_bn_relu/14x14": (conv_bn_relu, (1, 256, 14, 14, 256), (1, 16, 7, 7, 16)),
    "add_layer_norm": (add_layer_norm, (4096, 4096), (256, 256)),
}


# -- timing -------------------------------------------------------------------------------------


def _arrays_for(tensors, rng):
    out = []
    for t in tensors:
        shape = [int(e.value) for e in t.shape]
        out.append(tf.nd.array(rng.uniform(-1, 1, shape).astype(t.dtype)))
    return out


def compile_kernels(kernels: list[tuple]) -> list[tuple]:
    """Built modules with their (random) argument arrays, ready to time. An unfused pair is
    chained: the second kernel reads the first one's output (not fresh random values), so it
    sees the values it would in the fused kernel (a GEMM's outputs are ~10x its inputs, and
    erf's far tails take another path)."""
    rng = np.random.default_rng(0)
    built = [(tf.build(s, tensors), _arrays_for(tensors, rng)) for s, tensors in kernels]
    for (mod, arrays), (_, next_arrays) in zip(built, built[1:]):
        out = arrays[-1]
        same = [k for k, a in enumerate(next_arrays[:-1]) if a.shape == out.shape]
        if same:
            next_arrays[same[0]] = out
            mod(*arrays)  # the output, computed once
    return built


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def time_interleaved(variants: dict, number: int, rounds: int, clock: str = "cpu") -> dict:
    """Seconds per call of each variant (a list of built kernels run in sequence), timed in
    turns, round after round, keeping each kernel's fastest round: on a shared machine the
    variants then see the same disturbances, and the ratios hold even when the times drift.
    `clock` "cpu": this thread's CPU time (one thread runs each kernel, TF_NUM_THREADS=1), so
    the time the OS gives other processes is not counted (on 2 cores at load 7, wall-clock
    ratios moved by +-20% from run to run); "wall": the runtime's time_evaluator."""
    best: dict = {name: [math.inf] * len(kernels) for name, kernels in variants.items()}
    now = CLOCKS[clock]
    for _ in range(rounds):
        for name, kernels in variants.items():
            for k, (mod, arrays) in enumerate(kernels):
                if clock == "wall":
                    timer = mod.time_evaluator(mod.entry_name, tf.cpu(0), number=number, repeat=1)
                    best[name][k] = min(best[name][k], timer(*arrays).results[0])
                    continue
                function = mod[mod.entry_name]
                function(*arrays)  # warm: caches, pages
                start = now()
                for _ in range(number):
                    function(*arrays)
                best[name][k] = min(best[name][k], (now() - start) / number)
    return {name: sum(times) for name, times in best.items()}


def time_numpy(run, number: int, repeat: int, clock: str = "cpu") -> float:
    run()
    best = []
    now = CLOCKS[clock]
    for _ in range(repeat):
        start = now()
        for _ in range(number):
            run()
        best.append((now() - start) / number)
    return float(min(best))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tune", type=int, default=0, help="more trials per case before timing")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--logs", default="auto_schedule_logs")
    parser.add_argument("--small", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument(
        "--search-quality",
        type=int,
        default=0,
        metavar="TRIALS",
        help="random-search trials per seed in a search-quality run (guided: half; 1000 on"
        " GEMM 256³: ~5 min a seed for random, ~3 for each guided mode on a quiet machine)",
    )
    parser.add_argument("--sq-args", default="[256, 256, 256]", help="GEMM n, k, m (JSON)")
    parser.add_argument("--sq-modes", default="guided,guided_cold,random")
    parser.add_argument("--sq-seeds", default="0,1,2")
    parser.add_argument("--sq-out", default=None, help="append each run's curve (JSON lines)")
    parser.add_argument("--sq-report", default=None, help="only print the table of an --sq-out")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--number", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=8, help="rounds of interleaved timing")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu", help="thread CPU time or wall clock"
    )
    parser.add_argument(
        "--target",
        default="llvm",
        help="compile for this target, run here ('llvm -mcpu=znver3': an AVX2 machine's schedules)",
    )
    opts = parser.parse_args()
    os.makedirs(opts.logs, exist_ok=True)
    with tf.Target(opts.target):
        run_cases(opts)


def run_cases(opts) -> None:
    # 15 s a build or a run: a candidate past that is no contender (every hand schedule here
    # runs in < 0.2 s; softmax and layer norm candidates that recompute a row's reduction per
    # element ran into the old 40 s, a third of a tuning slice's wall time)
    option = tune.measure_option(number=2, repeat=2, timeout=15, n_parallel=1)
    rows = []
    for case in [c for c in opts.cases.split(",") if c and c != "none"]:
        func, full, small = CASES[case]
        args = small if opts.small else full
        task = auto.SearchTask(func, args, opts.target)
        log = os.path.join(opts.logs, f"{case.replace('/', '_')}.jsonl")
        if opts.tune:
            task.tune(opts.tune, log=log, seed=len(rows), measure_option=option)
        start = time.perf_counter()
        guess = analytic.first_guess(task)
        guess_s = time.perf_counter() - start
        row = {"case": case, "args": list(args), "guess_seconds": guess_s}
        trials = len(tuning.task_records(task, log))
        row["trials"] = trials
        variants = {name: compile_kernels(k) for name, k in hand_variants(case, args).items()}
        if "hand_plain" in variants:  # a fused case: its anchor and its passes, timed alone too
            e = 1 if not case.startswith("add_layer_norm") else 0
            variants["anchor"] = [variants["hand"][1 - e]]
            variants["pass_ops"] = [variants["hand"][e]]
            variants["pass_plain"] = [variants["hand_plain"][e]]
        variants["first_guess"] = compile_kernels([task.instantiate(guess)])
        if trials:
            variants["tuned"] = compile_kernels([task.apply_best(log)])
        row.update(time_interleaved(variants, opts.number, opts.repeat, opts.clock))
        row["hand"] = min(row["hand"], row.pop("hand_plain", math.inf))
        if "anchor" in row:
            row["pass"] = min(row.pop("pass_ops"), row.pop("pass_plain"))
            row["pass_math"] = pass_math_seconds(case, args, opts.number, opts.repeat, opts.clock)
        # the first guess is a candidate too: the tuned result is never slower than it
        row["tuned"] = min(row.get("tuned", math.inf), row["first_guess"])
        tensors = task.fresh()[1]
        run = numpy_reference(
            case, [a.numpy() for a in _arrays_for(tensors, np.random.default_rng(0))]
        )
        row["numpy"] = time_numpy(run, opts.number, opts.repeat, opts.clock) if run else None
        rows.append(row)
        if opts.json:
            print(json.dumps(row))
    if opts.search_quality or opts.sq_report:
        if opts.search_quality:
            sq_args = (128, 128, 128) if opts.small else tuple(json.loads(opts.sq_args))
            modes, seeds = opts.sq_modes.split(","), [int(x) for x in opts.sq_seeds.split(",")]
            rows_sq = search_quality(gemm, opts.search_quality, sq_args, modes, seeds, opts.sq_out)
        else:
            with open(opts.sq_report) as f:
                rows_sq = [json.loads(line) for line in f if line.strip()]
        print_search_quality(rows_sq)
    print_table(rows, opts.clock, opts.target)


def _ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


TARGETS = {  # hand/tuned wanted (issue 16); fused cases: against the best unfused pair
    "gemm": 0.9,
    "conv2d": 0.9,
    "softmax": 0.9,
    "layer_norm": 0.9,
    "gemm_bias_gelu": 1.2,
    "conv_bn_relu": 1.2,
    "add_layer_norm": 1.2,
}


def ceilings(r: dict) -> tuple[float, float] | None:
    """A fused row's best possible ratio over its unfused pair, from its parts timed alone:
    (anchor + pass) / anchor (fusion removes the whole pass) and (anchor + pass) / (anchor +
    the pass's arithmetic, timed in cache: what fusion cannot remove). The row's ratio passes
    them only where its anchor beats the hand's."""
    if "anchor" not in r:
        return None
    pair = r["anchor"] + r["pass"]
    return pair / r["anchor"], pair / (r["anchor"] + r["pass_math"])


def print_table(rows: list[dict], clock: str = "cpu", target: str = "llvm") -> None:
    print(
        f"\n{'case':<22}{'trials':>7}{'hand ms':>10}{'guess ms':>10}{'tuned ms':>10}"
        f"{'hand/tuned':>11}{'hand/guess':>11}{'guess/tuned':>12}{'numpy/tuned':>12}{'guess s':>8}"
        f"{'target':>13}{'anchor ms':>10}{'pass ms':>9}{'math ms':>9}{'ceiling':>8}{'w/ math':>8}"
    )
    for r in rows:
        tuned = r["tuned"] or r["first_guess"]
        want = TARGETS.get(r["case"].split("/")[0])
        caps = ceilings(r)
        verdict = "" if want is None else ("hit" if r["hand"] / tuned >= want else "MISS")
        if verdict == "MISS" and caps and caps[1] < want:
            verdict = "MISS*"  # the fusion ceiling is under the target
        parts = ""
        if caps:
            parts = (
                f"{r['anchor'] * 1e3:>10.3f}{r['pass'] * 1e3:>9.3f}{r['pass_math'] * 1e3:>9.3f}"
                f"{caps[0]:>8.2f}{caps[1]:>8.2f}"
            )
        print(
            f"{r['case']:<22}{r['trials']:>7}{r['hand'] * 1e3:>10.3f}{r['first_guess'] * 1e3:>10.3f}"
            f"{tuned * 1e3:>10.3f}{_ratio(r['hand'], tuned):>11}{_ratio(r['hand'], r['first_guess']):>11}"
            f"{_ratio(tuned, r['first_guess']):>12}{_ratio(r['numpy'], tuned):>12}{r['guess_seconds']:>8.2f}"
            f"{f'>={want} {verdict}' if want else '':>13}{parts}"
        )
    load = os.getloadavg()
    print(
        "(ratios > 1: the auto schedule is faster; guess/tuned: the first guess's share of the tuned"
        " speed; fused cases: 'hand' is the best unfused pair of ops schedules: its anchor and"
        " its element-wise pass, each also timed alone ('math': the pass's arithmetic alone, in"
        " cache); 'ceiling' = (anchor + pass) / anchor, what fusion could give with an anchor"
        " as fast as the hand's, 'w/ math' = (anchor + pass) / (anchor + math), the arithmetic"
        " being still done in the fused kernel; MISS*: a ceiling is under the target, which"
        " only a faster anchor (or faster math) can reach;"
        f" {'thread CPU' if clock == 'cpu' else 'wall-clock'} time, 1 thread;"
        f" target {target!r};"
        f" load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})"
    )


if __name__ == "__main__":
    main()
