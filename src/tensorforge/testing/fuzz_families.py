"""The computations the schedule fuzzer draws from, as Python source with a NumPy reference.

Each family draws integer parameters (shapes of 1..40 with primes and 1s, a few variants) and
turns them into source text that defines `inputs`, `outputs` (te tensors), `in_shapes`,
`out_shapes` (concrete shapes, so symbolic sizes are bound at call time), `reference(*inputs)`
(NumPy, in float64) and `rtol`, `atol`. The text is exactly what the fuzzer runs and what it
prints for a failure, so a reproducer never drifts from the case that failed. Parameters are
plain ints so the shrinker can make them smaller.
"""

from __future__ import annotations

from collections.abc import Callable

from tensorforge.testing.fuzz_choice import Chooser

Params = dict[str, int]

# element-wise steps: (te expression, numpy expression, inputs used). `{x}` is the previous
# value (te: an access, numpy: an array); `{a}` / `{b}` / `{c}` access A / B (along the last
# axis) / C (along the first axis).
_EW_OPS: list[tuple[str, str, str]] = [
    ("{x} + {b}", "x + b", "B"),
    ("{x} * {c}", "x * c", "C"),
    ("{x} * 2.0 - {a}", "x * 2 - a", "A"),
    ("te.max({x}, 0.0)", "np.maximum(x, 0)", ""),
    ("te.exp({x} * 0.5)", "np.exp(x * 0.5)", ""),
    ("te.sigmoid({x})", "1 / (1 + np.exp(-x))", ""),
    ("te.if_then_else({x} > 0.0, {x}, {x} * 0.25)", "np.where(x > 0, x, x * 0.25)", ""),
    ("{flip}", "np.flip(x, 0)", ""),  # reads the previous stage back to front along axis 0
    ("te.min({x}, {c}) * {b}", "np.minimum(x, c) * b", "BC"),
]
_AXES = ("i", "j", "l")
_RED = ("sum", "max", "min")
_NP_RED = {"sum": ("np.sum", "0.0"), "max": ("np.max", "-np.inf"), "min": ("np.min", "np.inf")}


def _float64(names: list[str]) -> str:
    if not names:
        return ""
    return f"    {', '.join(names)} = {', '.join(n + '.astype(np.float64)' for n in names)}\n"


# -- element-wise chains with broadcasts ----------------------------------------------------------
def draw_elementwise(ch: Chooser) -> Params:
    p = {"rank": ch.integer(1, 3), "d0": ch.size(), "d1": ch.size(), "d2": ch.size(12)}
    for k in range(ch.integer(1, 4)):
        p[f"op{k}"] = ch.integer(0, len(_EW_OPS) - 1)
    return p


def elementwise(p: Params) -> str:
    rank = p["rank"]
    dims = [p["d0"], p["d1"], p["d2"]][:rank]
    idx = ", ".join(_AXES[:rank])
    shape = _tuple(dims)
    ops = [_EW_OPS[p[k]] for k in sorted(k for k in p if k.startswith("op"))]
    used = {"A"} | {name for _, _, names in ops for name in names}
    inputs = [n for n in "ABC" if n in used]
    shapes = {"A": tuple(dims), "B": tuple(dims[-1:]), "C": tuple(dims[:1])}
    lines = [f'{n} = te.placeholder({_tuple(shapes[n])}, name="{n}")' for n in inputs]
    ref = [_float64([n.lower() for n in inputs])]
    if "C" in used:
        ref.append(f"    c = c.reshape((-1,) + (1,) * {rank - 1})\n")
    ref.append("    x = a\n")
    prev = "A"
    flip_idx = ", ".join([f"{dims[0] - 1} - i", *_AXES[1:rank]])
    for k, (te_expr, np_expr, _) in enumerate(ops):
        name = f"T{k + 1}"
        x = f"{prev}[{idx}]"
        expr = te_expr.format(
            x=x, a=f"A[{idx}]", b=f"B[{_AXES[rank - 1]}]", c="C[i]", flip=f"{prev}[{flip_idx}]"
        )
        lines.append(f'{name} = te.compute({shape}, lambda {idx}: {expr}, name="{name}")')
        ref.append(f"    x = {np_expr}\n")
        prev = name
    return _module(
        lines,
        inputs,
        [prev],
        [shapes[n] for n in inputs],
        [dims],
        "".join(ref) + "    return x\n",
        1e-4,
        1e-5,
    )


# -- matmul, and matmul + bias + relu ---------------------------------------------------------------
def draw_matmul(ch: Chooser) -> Params:
    return {"n": ch.size(), "l": ch.size(), "m": ch.size(), "epilogue": ch.integer(0, 1)}


def matmul(p: Params) -> str:
    n, l, m = p["n"], p["l"], p["m"]
    lines = [
        f'A = te.placeholder(({n}, {l}), name="A")',
        f'B = te.placeholder(({l}, {m}), name="B")',
        f'k = te.reduce_axis((0, {l}), name="k")',
        f'C = te.compute(({n}, {m}), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")',
    ]
    inputs, out, ref = (
        ["A", "B"],
        "C",
        "    a, b = a.astype(np.float64), b.astype(np.float64)\n    x = a @ b\n",
    )
    if p["epilogue"]:
        lines.append(f'bias = te.placeholder(({m},), name="bias")')
        lines.append(
            f'D = te.compute(({n}, {m}), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="D")'
        )
        inputs, out = ["A", "B", "bias"], "D"
        ref += "    x = np.maximum(x + bias.astype(np.float64), 0)\n"
    shapes = {"A": (n, l), "B": (l, m), "bias": (m,)}
    return _module(
        lines,
        inputs,
        [out],
        [shapes[i] for i in inputs],
        [(n, m)],
        ref + "    return x\n",
        1e-4,
        1e-4,
    )


# -- stencils with a producer ---------------------------------------------------------------------
def draw_stencil(ch: Chooser) -> Params:
    return {
        "rank": ch.integer(1, 2),
        "n": ch.size(),
        "m": ch.size(),
        "taps": ch.integer(2, 3),
        "chain": ch.integer(1, 2),
    }


def stencil(p: Params) -> str:
    n, m, taps, rank = p["n"], p["m"], p["taps"], p["rank"]
    if rank == 1:
        big, out_shape, idx = (n + taps - 1,), (n,), "i"
        reads = ["B[i]", "B[i + 1] * 0.5", "B[i + 2]"][:taps]
        np_reads = [f"x[{t}:{t + n}]" + ("" if t != 1 else " * 0.5") for t in range(taps)]
    else:
        big, out_shape, idx = (n + taps - 1, m + 1), (n, m), "i, j"
        reads = ["B[i, j]", "B[i + 1, j] * 0.5", "B[i, j + 1] * 0.25", "B[i + 2, j + 1]"][
            : taps + 1
        ]
        np_reads = [
            f"x[:{n}, :{m}]",
            f"x[1:{n + 1}, :{m}] * 0.5",
            f"x[:{n}, 1:{m + 1}] * 0.25",
            f"x[2:{n + 2}, 1:{m + 1}]",
        ][: taps + 1]
    lines = [f'A = te.placeholder({_tuple(big)}, name="A")']
    lines.append(f'B = te.compute({_tuple(big)}, lambda {idx}: A[{idx}] * 2.0 + 1.0, name="B")')
    ref = "    x = a.astype(np.float64) * 2 + 1\n"
    if p["chain"] == 2:  # a second producer stage between the input and the stencil
        lines[-1] = lines[-1].replace('"B"', '"B0"').replace("B = ", "B0 = ")
        lines.append(
            f'B = te.compute({_tuple(big)}, lambda {idx}: B0[{idx}] * B0[{idx}] - A[{idx}], name="B")'
        )
        ref += "    x = x * x - a\n"
    lines.append(
        f'C = te.compute({_tuple(out_shape)}, lambda {idx}: {" + ".join(reads)}, name="C")'
    )
    ref += f"    return {' + '.join(np_reads)}\n"
    return _module(lines, ["A"], ["C"], [big], [out_shape], ref, 1e-4, 1e-4)


# -- reductions over one or two axes, with where= ----------------------------------------------------
def draw_reduction(ch: Chooser) -> Params:
    return {
        "layout": ch.integer(
            0, 2
        ),  # 0: rows of a matrix, 1: a whole matrix, 2: two axes of a 3-d array
        "op": ch.integer(0, 2),
        "where": ch.integer(0, 2),
        "producer": ch.integer(0, 1),
        "n": ch.size(),
        "m": ch.size(),
        "q": ch.size(12),
    }


def reduction(p: Params) -> str:
    n, m, q, op, layout = p["n"], p["m"], p["q"], _RED[p["op"]], p["layout"]
    if layout == 0:
        shape, out, idx, raxes = (n, m), (n,), "i", [("k", m)]
        read, np_axis = "src[i, k]", "1"
        mask = ["", "k % 2 == 0", "k <= i"][p["where"]]
        np_mask = ["", "(kk % 2 == 0)", "(kk <= ii)"][p["where"]]
        grids = "    ii, kk = np.indices(x.shape)\n"
    else:
        if layout == 1:
            shape, out, idx, raxes = (n, m), (1,), "i", [("r", n), ("c", m)]
            read, np_axis = "src[r, c]", "(0, 1)"
            grids = "    rr, cc = np.indices(x.shape)\n"
        else:
            shape, out, idx, raxes = (n, m, q), (n,), "i", [("r", m), ("c", q)]
            read, np_axis = "src[i, r, c]", "(1, 2)"
            grids = "    _, rr, cc = np.indices(x.shape)\n"
        mask = ["", "(r + c) % 3 == 0", "r <= c"][p["where"]]
        np_mask = ["", "((rr + cc) % 3 == 0)", "(rr <= cc)"][p["where"]]
    lines = [f'A = te.placeholder({_tuple(shape)}, name="A")']
    ref = "    x = a.astype(np.float64)\n"
    if p["producer"]:
        full = ", ".join(_AXES[: len(shape)])
        lines.append(
            f'B = te.compute({_tuple(shape)}, lambda {full}: A[{full}] * 2.0 + 1.0, name="B")'
        )
        ref += "    x = x * 2 + 1\n"
    src = "B" if p["producer"] else "A"
    for name, extent in raxes:
        lines.append(f'{name} = te.reduce_axis((0, {extent}), name="{name}")')
    axis = raxes[0][0] if len(raxes) == 1 else "[" + ", ".join(r for r, _ in raxes) + "]"
    where = f", where={mask}" if mask else ""
    lines.append(
        f'C = te.compute({_tuple(out)}, lambda {idx}: te.{op}({read.replace("src", src)}, axis={axis}{where}), name="C")'
    )
    np_red, identity = _NP_RED[op]
    if mask:
        ref += grids + f"    x = np.where({np_mask}, x, {identity})\n"
    ref += f"    return {np_red}(x, axis={np_axis}).reshape({_tuple(out)})\n"
    size = m if layout == 0 else (n * m if layout == 1 else m * q)
    return _module(lines, ["A"], ["C"], [shape], [out], ref, 1e-4, 2e-5 * size + 1e-5)


# -- softmax ---------------------------------------------------------------------------------------
def draw_softmax(ch: Chooser) -> Params:
    return {"n": ch.size(), "m": ch.size()}


def softmax(p: Params) -> str:
    n, m = p["n"], p["m"]
    lines = [
        f'A = te.placeholder(({n}, {m}), name="A")',
        f'k1 = te.reduce_axis((0, {m}), name="k1")',
        f'M = te.compute(({n},), lambda i: te.max(A[i, k1], axis=k1), name="M")',
        f'E = te.compute(({n}, {m}), lambda i, j: te.exp(A[i, j] - M[i]), name="E")',
        f'k2 = te.reduce_axis((0, {m}), name="k2")',
        f'S = te.compute(({n},), lambda i: te.sum(E[i, k2], axis=k2), name="S")',
        f'D = te.compute(({n}, {m}), lambda i, j: E[i, j] / S[i], name="D")',
    ]
    ref = "    a = a.astype(np.float64)\n    e = np.exp(a - a.max(axis=1, keepdims=True))\n    return e / e.sum(axis=1, keepdims=True)\n"
    return _module(lines, ["A"], ["D"], [(n, m)], [(n, m)], ref, 1e-4, 1e-5)


# -- conv2d with padding (tiny) --------------------------------------------------------------------
def draw_conv2d(ch: Chooser) -> Params:
    p = {
        "batch": ch.integer(1, 2),
        "cin": ch.integer(1, 3),
        "cout": ch.integer(1, 3),
        "h": ch.size(9),
        "w": ch.size(9),
        "kh": ch.integer(1, 3),
        "kw": ch.integer(1, 3),
        "pad": ch.integer(0, 2),
        "stride": ch.integer(1, 2),
        "clamp": ch.integer(0, 1),
    }
    p["kh"] = min(p["kh"], p["h"] + 2 * p["pad"])
    p["kw"] = min(p["kw"], p["w"] + 2 * p["pad"])
    return p


def conv2d(p: Params) -> str:
    nb, ci, co, h, w, kh, kw, pad, st = (
        p[k] for k in ("batch", "cin", "cout", "h", "w", "kh", "kw", "pad", "stride")
    )
    oh, ow = (h + 2 * pad - kh) // st + 1, (w + 2 * pad - kw) // st + 1
    y, x = f"y - {pad}", f"x - {pad}"
    if p.get("clamp"):  # a variant: the padded read, discarded at the border, kept in bounds
        y, x = f"te.min(te.max(y - {pad}, 0), {h - 1})", f"te.min(te.max(x - {pad}, 0), {w - 1})"
    if oh < 1 or ow < 1:
        raise ValueError("conv2d: the kernel is larger than the padded input")
    lines = [
        f'data = te.placeholder(({nb}, {ci}, {h}, {w}), name="data")',
        f'kernel = te.placeholder(({co}, {ci}, {kh}, {kw}), name="kernel")',
        f"pad = te.compute(({nb}, {ci}, {h + 2 * pad}, {w + 2 * pad}), lambda b, c, y, x: te.if_then_else("
        f"te.all(y >= {pad}, y < {h + pad}, x >= {pad}, x < {w + pad}), data[b, c, {y}, {x}], 0.0), "
        f'name="pad")',
        f'rc = te.reduce_axis((0, {ci}), name="rc")',
        f'ry = te.reduce_axis((0, {kh}), name="ry")',
        f'rx = te.reduce_axis((0, {kw}), name="rx")',
        f"conv = te.compute(({nb}, {co}, {oh}, {ow}), lambda b, f, y, x: te.sum("
        f'pad[b, rc, y * {st} + ry, x * {st} + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")',
    ]
    ref = (
        f"    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), ({pad}, {pad}), ({pad}, {pad})))\n"
        f"    out = np.zeros(({nb}, {co}, {oh}, {ow}))\n"
        f"    for ry in range({kh}):\n"
        f"        for rx in range({kw}):\n"
        f"            window = padded[:, :, ry : ry + {st * (oh - 1) + 1} : {st}, rx : rx + {st * (ow - 1) + 1} : {st}]\n"
        f'            out += np.einsum("bcyx,fc->bfyx", window, kernel[:, :, ry, rx].astype(np.float64))\n'
        f"    return out\n"
    )
    return _module(
        lines,
        ["data", "kernel"],
        ["conv"],
        [(nb, ci, h, w), (co, ci, kh, kw)],
        [(nb, co, oh, ow)],
        ref,
        1e-4,
        1e-4,
    )


# -- multi-output compute --------------------------------------------------------------------------
def draw_multi_output(ch: Chooser) -> Params:
    return {"n": ch.size(), "m": ch.size(), "consumer": ch.integer(0, 1)}


def multi_output(p: Params) -> str:
    n, m = p["n"], p["m"]
    lines = [
        f'A = te.placeholder(({n}, {m}), name="A")',
        f'B = te.placeholder(({m},), name="B")',
        f'P, Q = te.compute(({n}, {m}), lambda i, j: (A[i, j] + B[j], A[i, j] * B[j]), name="PQ")',
    ]
    ref = "    a, b = a.astype(np.float64), b.astype(np.float64)\n"
    if p["consumer"]:
        lines.append(f'D = te.compute(({n}, {m}), lambda i, j: P[i, j] * Q[i, j] - 1.0, name="D")')
        ref += "    return (a + b) * (a * b) - 1\n"
        return _module(lines, ["A", "B"], ["D"], [(n, m), (m,)], [(n, m)], ref, 1e-4, 1e-5)
    ref += "    return a + b, a * b\n"
    return _module(lines, ["A", "B"], ["P", "Q"], [(n, m), (m,)], [(n, m), (n, m)], ref, 1e-4, 1e-5)


# -- dynamic shapes: te.var sizes bound at call time ---------------------------------------------------
def draw_dynamic(ch: Chooser) -> Params:
    return {"variant": ch.integer(0, 2), "n": ch.size(), "m": ch.size()}


def dynamic(p: Params) -> str:
    n, m, variant = p["n"], p["m"], p["variant"]
    lines = ['n = te.var("n")', 'm = te.var("m")']
    if variant == 0:  # an element-wise chain with a broadcast
        lines += [
            'A = te.placeholder((n, m), name="A")',
            'B = te.placeholder((m,), name="B")',
            'C = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + B[j], name="C")',
            'D = te.compute((n, m), lambda i, j: te.max(C[i, j], 0.0) - A[i, j], name="D")',
        ]
        ref = "    a, b = a.astype(np.float64), b.astype(np.float64)\n    return np.maximum(a * 2 + b, 0) - a\n"
        return _module(lines, ["A", "B"], ["D"], [(n, m), (m,)], [(n, m)], ref, 1e-4, 1e-5)
    if variant == 1:  # a row reduction over a symbolic extent, with a producer
        lines += [
            'A = te.placeholder((n, m), name="A")',
            'B = te.compute((n, m), lambda i, j: A[i, j] * A[i, j], name="B")',
            'k = te.reduce_axis((0, m), name="k")',
            'C = te.compute((n,), lambda i: te.sum(B[i, k], axis=k), name="C")',
        ]
        ref = "    a = a.astype(np.float64)\n    return (a * a).sum(axis=1)\n"
        return _module(lines, ["A"], ["C"], [(n, m)], [(n,)], ref, 1e-4, 2e-5 * m + 1e-5)
    lines += [  # a clamped 1-d stencil
        'A = te.placeholder((n,), name="A")',
        'B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")',
        'C = te.compute((n,), lambda i: B[i] + B[te.min(i + 1, n - 1)] * 0.5, name="C")',
    ]
    ref = "    x = a.astype(np.float64) * 2 + 1\n    return x + np.append(x[1:], x[-1:]) * 0.5\n"
    return _module(lines, ["A"], ["C"], [(n,)], [(n,)], ref, 1e-4, 1e-5)


# -- int64 index arithmetic: products past 2**31 inside the index, every element read exists --------
_BIG = (2**31 + 11, 3_000_000_019, 65536 * 65537, 2**40 + 7)


def draw_int64_index(ch: Chooser) -> Params:
    n = len(_BIG) - 1
    return {
        "variant": ch.integer(0, 1),
        "n": ch.size(),
        "m": ch.size(),
        "k": ch.integer(0, n),
        "c": ch.integer(0, n),
    }


def int64_index(p: Params) -> str:
    n, m, k, c = p["n"], p["m"], _BIG[p["k"]], _BIG[p["c"]]
    if p["variant"] == 0:  # a gather through (i*K + C) % n, computed in int64
        lines = [
            f'X = te.placeholder(({n},), name="X")',
            f"Y = te.compute(({m},), lambda i: "
            f'X[(i.astype("int64") * {k} + {c}) % {n}] * 2.0, name="Y")',
        ]
        ref = (
            f"    idx = ((np.arange({m}, dtype=object) * {k} + {c}) % {n}).astype(np.int64)\n"
            "    return x.astype(np.float64)[idx] * 2\n"
        )
        return _module(lines, ["X"], ["Y"], [(n,)], [(m,)], ref, 1e-5, 1e-6)
    lines = [  # a symbolic 2-d buffer (int64 offsets) read through an int64 column index
        'r, q = te.var("r"), te.var("q")',
        'X = te.placeholder((r, q), name="X")',
        'Y = te.compute((r, q), lambda i, j: X[i, (j.astype("int64") * '
        f'{k} + {c}) % q] + 1.0, name="Y")',
    ]
    ref = (
        f"    idx = ((np.arange({m}, dtype=object) * {k} + {c}) % {m}).astype(np.int64)\n"
        "    return x.astype(np.float64)[:, idx] + 1\n"
    )
    return _module(lines, ["X"], ["Y"], [(n, m)], [(n, m)], ref, 1e-5, 1e-6)


# -- wide vectors: a last axis of up to 256 elements, vectorizable whole ------------------------------
_WIDE = (64, 96, 128, 256)


def draw_wide(ch: Chooser) -> Params:
    return {"d0": ch.size(8), "w": ch.integer(0, len(_WIDE) - 1), "op0": ch.integer(0, 6)}


def wide(p: Params) -> str:
    return elementwise({"rank": 2, "d0": p["d0"], "d1": _WIDE[p["w"]], "d2": 1, "op0": p["op0"]})


def _tuple(dims) -> str:
    dims = tuple(dims)
    return f"({dims[0]},)" if len(dims) == 1 else "(" + ", ".join(str(d) for d in dims) + ")"


def _module(
    lines: list[str],
    inputs: list[str],
    outputs: list[str],
    in_shapes: list,
    out_shapes: list,
    reference_body: str,
    rtol: float,
    atol: float,
) -> str:
    args = ", ".join(name.lower() if len(name) == 1 else name for name in inputs)
    return (
        "\n".join(lines)
        + f"\ninputs, outputs = [{', '.join(inputs)}], [{', '.join(outputs)}]\n"
        + f"in_shapes = [{', '.join(_tuple(s) for s in in_shapes)}]\n"
        + f"out_shapes = [{', '.join(_tuple(s) for s in out_shapes)}]\n"
        + f"rtol, atol = {rtol:g}, {atol:g}\n\n\n"
        + f"def reference({args}):\n{reference_body}"
    )


FAMILIES: dict[str, tuple[Callable[[Chooser], Params], Callable[[Params], str]]] = {
    "elementwise": (draw_elementwise, elementwise),
    "matmul": (draw_matmul, matmul),
    "stencil": (draw_stencil, stencil),
    "reduction": (draw_reduction, reduction),
    "softmax": (draw_softmax, softmax),
    "conv2d": (draw_conv2d, conv2d),
    "multi_output": (draw_multi_output, multi_output),
    "dynamic": (draw_dynamic, dynamic),
    "int64_index": (draw_int64_index, int64_index),
    "wide": (draw_wide, wide),
}


# the smallest value of each parameter (the shrinker's floor): variants and flags go to 0,
# sizes to 1
_ZERO_OK = {
    "clamp",
    "epilogue",
    "layout",
    "op",
    "where",
    "producer",
    "consumer",
    "variant",
    "pad",
    "k",
    "c",
    "w",
}


def param_minimum(key: str) -> int:
    if key == "taps":
        return 2
    return 0 if key in _ZERO_OK or key.startswith("op") else 1


def family_source(family: str, params: Params) -> str:
    return FAMILIES[family][1](params)
