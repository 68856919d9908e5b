"""The graph cache's first level, keyed on the graph Dynamo hands the backend: a hit skips
AOTAutograd (a quarter of a second for ResNet-18) and lowers the ATen graph it once produced.

An entry is written where the ATen graph is provably a plain function of Dynamo's inputs: AOT
kept the inputs one for one (no duplicates merged, no synthetic bases, no effect tokens), no
input is mutated, and AOT returns every output as the graph computes it (none is an input or
a view of one, which AOT rebuilds around the compiled graph). Then AOT's runtime wrappers have
nothing to do, and the compiled ATen graph takes Dynamo's inputs directly: on a hit, and on
the first compile too (backend.py returns it without AOT's wrappers, saving their cost on
every call: 1.5 us of a 64 x 1000 softmax's 45 under dynamic=True). A graph of symbolic sizes
is returned so too, but gets no entry. Anything else (mutation, aliasing, a submodule or
attribute the graph reads, a tensor subclass, autocast, `check`/`report`) goes through AOT as
before.

The entry holds the ATen graph (each node's operator, arguments and result shape, as JSON: no
code is loaded from it) and the key of its kernels' entry in cache.py. Lowering runs again on
every hit, from the live weights, so weights folded and packed at compile time follow the
model's current values. The key is a hash of Dynamo's graph (its code, each node's target and
example value), each input's type, shape, stride, dtype and device, which inputs are weights,
the grad mode and default dtype, torch's version, and what cache.py's key holds
besides the ATen graph (target, tuning log, schedule, settings, tensorforge's version, source).
"""

from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass

import torch
import torch.fx

from tensorforge.graph import cache as graph_cache
from tensorforge.graph.options import Float32Precision
from tensorforge.runtime import library_file

FORMAT = 1
SUFFIX = ".front"
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    unsafe: int = 0  # graphs AOT had to wrap: never given an entry
    rejected: int = 0
    last_reason: str = ""


STATS = Stats()


@dataclass
class Entry:
    aten_gm: torch.fx.GraphModule  # rebuilt, with each node's meta["val"]
    aten_key: str  # the kernels' entry (cache.py)
    as_tuple: bool  # Dynamo's graph returns a tuple (else a list)


# -- the key --------------------------------------------------------------------------------------
def direct_graph(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Can AOT's ATen graph be a plain function of Dynamo's inputs at all? Not with a submodule
    or attribute (AOT adds their tensors as inputs), an input other than a tensor or a size
    symbol (a tensor subclass, a float), or autocast on (AOT's wrapper turns it off around the
    graph). Sizes may be symbolic: the compiled graph binds them from each call's arguments
    (Dynamo passes every symbol as an int), and Dynamo's guards choose the graph."""
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()):
        return False
    if not all(type(x) in _PLAIN_TYPES or type(x) is torch.SymInt for x in example_inputs):
        return False
    if any(torch.is_autocast_enabled(kind) for kind in ("cpu", "cuda")):
        return False
    return all(
        node.op in ("placeholder", "call_function", "call_method", "output")
        for node in gm.graph.nodes
    )


def plain_graph(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """A `direct_graph` of static sizes: one that may have an entry (the entry's ATen graph
    holds its shapes as numbers)."""
    return (
        direct_graph(gm, example_inputs)
        and all(type(x) in _PLAIN_TYPES for x in example_inputs)
        and all(
            _static_signature(node.meta.get("example_value")) is not None for node in gm.graph.nodes
        )
    )


def front_key(
    gm: torch.fx.GraphModule, example_inputs, constants: dict, target, opts
) -> str | None:
    """The entry's name for this Dynamo graph (None where it is not a `plain_graph`)."""
    if not plain_graph(gm, example_inputs):
        return None
    parts = [
        "front",
        FORMAT,
        torch.__version__,
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        *graph_cache.options_parts(
            target, opts.tuning_log, opts.schedule, Float32Precision.of(target)
        ),
        gm.code,
    ]
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        parts += [node.op, node.name, _target_name(node.target), _static_signature(value)]
    for k, x in enumerate(example_inputs):
        parts += [type(x).__name__, tuple(x.shape), x.stride(), x.dtype, x.device]
        parts += [x.requires_grad, k in constants]
    return graph_cache.digest_of(parts)


def returns_tuple(gm: torch.fx.GraphModule) -> bool:
    return isinstance(gm.graph.output_node().args[0], tuple)


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None) or ""
    return (
        f"{module}.{getattr(target, '__qualname__', None) or getattr(target, '__name__', target)}"
    )


def _static_signature(value) -> str | None:
    """The value's shape, stride and dtype (None where a size is symbolic)."""
    if isinstance(value, torch.Tensor):
        sizes = (*value.shape, *value.stride())
        if not all(type(s) is int for s in sizes):
            return None
        return f"T{tuple(value.shape)}{value.stride()}{value.dtype}{value.device}"
    if isinstance(value, (list, tuple)):
        items = [_static_signature(v) for v in value]
        return None if None in items else "(" + ",".join(items) + ")"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return None
    return f"{type(value).__name__}:{value}"


# -- proving AOT's wrappers idle ------------------------------------------------------------------
def unsafe_reason(gm: torch.fx.GraphModule, example_inputs, aten_gm, aten_inputs) -> str | None:
    """Why the ATen graph is not a plain function of Dynamo's inputs (None: it is). Called
    inside AOT's compiler, where its analysis of the graph (fw_metadata) is at hand."""
    from torch._functorch._aot_autograd.schemas import OutputType

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return "no AOT metadata"
    if len(aten_inputs) != len(example_inputs):
        return "AOT changed the inputs"
    if meta.tokens or meta.num_intermediate_bases or getattr(meta, "is_rng_op_functionalized", 0):
        return "AOT added tokens, bases or RNG state"
    for info in meta.input_info:
        if info.mutates_data or info.mutates_metadata or info.mutation_inductor_storage_resize:
            return "an input is mutated"
    outputs = aten_gm.graph.output_node().args[0]
    dynamo_outputs = gm.graph.output_node().args[0]
    if not isinstance(outputs, (list, tuple)) or not isinstance(dynamo_outputs, (list, tuple)):
        return "outputs not a sequence"
    if not (len(outputs) == len(dynamo_outputs) == len(meta.output_info)):
        return "AOT changed the outputs"
    if any(o.output_type != OutputType.non_alias for o in meta.output_info):
        return "an output aliases an input or another output"
    if any(not isinstance(o, torch.fx.Node) for o in outputs):
        return "an output is not a graph value"
    return None


# -- the ATen graph as JSON -----------------------------------------------------------------------
class _Unserializable(Exception):
    pass


def graph_to_json(aten_gm: torch.fx.GraphModule) -> list:
    """Each node as [op, name, target, args, kwargs, value] (raises _Unserializable)."""
    nodes = []
    for node in aten_gm.graph.nodes:
        if node.op not in ("placeholder", "call_function", "output"):
            raise _Unserializable(f"a {node.op} node")
        target = _encode_target(node.target) if node.op == "call_function" else None
        args, kwargs = _encode(node.args), _encode(node.kwargs)
        value = _encode_value(node.meta.get("val")) if node.op != "output" else None
        nodes.append([node.op, node.name, target, args, kwargs, value])
    return nodes


def graph_from_json(nodes: list) -> torch.fx.GraphModule:
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    mode = FakeTensorMode()
    for op, name, target, args, kwargs, value in nodes:
        args, kwargs = _decode(args, env), _decode(kwargs, env)
        if op == "placeholder":
            node = graph.placeholder(name)
        elif op == "call_function":
            node = graph.create_node(op, _decode_target(target), args, kwargs, name=name)
        else:
            node = graph.output(args[0])
        if op != "output":
            if node.name != name:
                raise _Unserializable(f"node {name} came back as {node.name}")
            node.meta["val"] = _decode_value(value, mode)
            env[name] = node
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _encode_target(target) -> list:
    if isinstance(target, torch._ops.OpOverload):
        namespace, name = target._schema.name.split("::")
        return ["op", namespace, name, target._overloadname or "default"]
    if target is operator.getitem:
        return ["getitem"]
    raise _Unserializable(f"operator {target}")


def _decode_target(spec: list):
    if spec[0] == "getitem":
        return operator.getitem
    _, namespace, name, overload = spec
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _encode(value):
    if isinstance(value, torch.fx.Node):
        return {"node": value.name}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_encode(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode(v) for k, v in value.items()}}
    if value is None or type(value) in (bool, int, float, str):
        return value
    for kind, types in _NAMED.items():
        if isinstance(value, types):
            return {kind: str(value).removeprefix("torch.")}
    raise _Unserializable(f"argument {value!r}")


_NAMED = {
    "dtype": torch.dtype,
    "device": torch.device,
    "layout": torch.layout,
    "memory_format": torch.memory_format,
}


def _decode(value, env: dict):
    if not isinstance(value, dict):
        return value
    ((kind, item),) = value.items()
    if kind == "node":
        return env[item]
    if kind in ("list", "tuple"):
        items = [_decode(v, env) for v in item]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: _decode(v, env) for k, v in item.items()}
    if kind == "device":
        return torch.device(item)
    return getattr(torch, item)


def _encode_value(value):
    if isinstance(value, torch.Tensor):
        sizes = (*value.shape, *value.stride())
        if not all(type(s) is int for s in sizes):
            raise _Unserializable("a symbolic size")
        dtype = str(value.dtype).removeprefix("torch.")
        return {"tensor": [list(value.shape), list(value.stride()), dtype, str(value.device)]}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_encode_value(v) for v in value]}
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _Unserializable("a symbolic value")
    return _encode(value)


def _decode_value(value, mode):
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, dict) and "tensor" in value:
        shape, stride, dtype, device = value["tensor"]
        elem = torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device="meta")
        return FakeTensor(mode, elem, torch.device(device))
    if isinstance(value, dict) and ("list" in value or "tuple" in value):
        items = [_decode_value(v, mode) for v in next(iter(value.values()))]
        return items if "list" in value else tuple(items)
    return _decode(value, {})


# -- entries on disk ------------------------------------------------------------------------------
def entry_path(key: str) -> str:
    return os.path.join(graph_cache.graphs_dir(), key + SUFFIX)


def store(key: str, gm, aten_gm, aten_key: str) -> None:
    """Write the entry (best effort: a graph that cannot be written is compiled through AOT
    next time too)."""
    try:
        nodes = graph_to_json(aten_gm)
    except _Unserializable as why:
        STATS.unsafe += 1
        STATS.last_reason = str(why)
        return
    record = {"format": FORMAT, "key": key, "aten_key": aten_key, "as_tuple": returns_tuple(gm)}
    data = json.dumps({**record, "nodes": nodes}).encode()
    try:
        os.makedirs(graph_cache.graphs_dir(), exist_ok=True)
        library_file.write_atomically(entry_path(key), data)
        STATS.writes += 1
    except OSError as err:
        STATS.last_reason = f"{type(err).__name__}: {err}"


def load(key: str) -> Entry | None:
    path = entry_path(key)
    try:
        with open(path, "rb") as f:
            record = json.loads(f.read())
    except (OSError, ValueError):
        if os.path.exists(path):
            reject(key)
        STATS.misses += 1
        return None
    try:
        if record.get("format") != FORMAT or record.get("key") != key:
            raise _Unserializable("another format or key")
        entry = Entry(graph_from_json(record["nodes"]), record["aten_key"], record["as_tuple"])
    except Exception:  # noqa: BLE001 - a damaged entry is a miss, never an error
        reject(key)
        STATS.misses += 1
        return None
    return entry


def reject(key: str) -> None:
    STATS.rejected += 1
    try:
        os.unlink(entry_path(key))
    except OSError:
        pass


class DynamoCallable:
    """The compiled ATen graph called with Dynamo's inputs and returning its outputs: what
    AOT's wrappers would do, where (as proved when the entry was written) they do nothing."""

    def __init__(self, compiled, as_tuple: bool):
        self.compiled = compiled
        self.as_tuple = as_tuple

    def __call__(self, *args):
        outputs = self.compiled(list(args))
        return tuple(outputs) if self.as_tuple else list(outputs)
