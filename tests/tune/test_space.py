"""Config spaces: sizes as TVM counts them, knob semantics, configs as plain data."""

import json
import math

import pytest

from tensorforge import te, tune
from tensorforge.tune.space import ConfigSpace, get_factors, get_pow2s


def test_factors_and_pow2s():
    assert get_factors(12) == [1, 2, 3, 4, 6, 12]
    assert get_pow2s(100) == [1, 2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize(
    "extent, num_outputs, policy, max_factor, size",
    [
        (512, 2, "factors", None, 10),  # divisors of 2^9
        (512, 3, "factors", None, 55),  # (a, b) with a * b | 512: 10 * 11 / 2
        (512, 4, "factors", None, 220),
        (512, 3, "factors", 64, 43),
        (100, 2, "factors", None, 9),
        (100, 2, "power2", None, 7),  # 1..64, tails allowed
        (100, 2, "verbose", None, 13),  # {1,2,4,5,10,20,25,50,100} | {1,2,...,64}
        (1, 3, "factors", None, 1),
    ],
)
def test_split_space_sizes(extent, num_outputs, policy, max_factor, size):
    cfg = ConfigSpace()
    cfg.define_split("s", extent, num_outputs=num_outputs, policy=policy, max_factor=max_factor)
    assert len(cfg) == size
    for config in cfg:
        sizes = config["s"].size
        assert len(sizes) == num_outputs
        inner = math.prod(sizes[1:])
        assert sizes[0] == -(-extent // inner)  # the outer loop covers the rest, tail included
        if policy == "factors":
            assert extent % inner == 0
        if max_factor is not None:
            assert max(sizes[1:]) <= max_factor


def test_split_first_choice_is_the_trivial_split():
    cfg = ConfigSpace()
    cfg.define_split("s", 64, num_outputs=3)
    assert cfg["s"].size == [64, 1, 1]


def test_space_size_is_product_and_indices_are_mixed_radix():
    cfg = ConfigSpace()
    cfg.define_split("a", 16, num_outputs=2)  # 5
    cfg.define_reorder("r", ["x", "y", "z"], policy="all")  # 3! = 6
    cfg.define_annotate("ann", ["x", "y"], policy="try_unroll_vec")  # 3*3 minus 1 (two vecs) = 8
    cfg.define_knob("k", [0, 1, 2])  # 3
    assert cfg.dims == [5, 6, 8, 3]
    assert len(cfg) == 5 * 6 * 8 * 3
    # the first knob varies fastest (TVM's numbering)
    assert cfg.get(1)["a"].size == [8, 2] and cfg.get(1)["k"].val == 0
    assert cfg.get(5 * 6 * 8)["k"].val == 1
    for index in (0, 17, 333, len(cfg) - 1):
        assert cfg.index_of(cfg.choices_of(index)) == index
    with pytest.raises(IndexError):
        cfg.get(len(cfg))


def test_annotate_and_reorder_policies():
    cfg = ConfigSpace()
    cfg.define_annotate("u", ["a", "b", "c"], policy="try_unroll")
    cfg.define_annotate("v", ["a", "b", "c"], policy="try_vec")
    a, b, c = object(), object(), object()
    cfg.define_reorder("r", [a, b, c], policy="candidate", candidate=[[a, b, c], [c, b, a]])
    assert cfg.dims == [8, 4, 2]  # 2^3; none or one vec of 3 axes; two candidates
    assert all(e.anns.count("vec") <= 1 for e in cfg.space_map["v"].entities)
    assert [e.perm for e in cfg.space_map["r"].entities] == [[0, 1, 2], [2, 1, 0]]


def test_bad_definitions_raise():
    cfg = ConfigSpace()
    with pytest.raises(ValueError, match="num_outputs"):
        cfg.define_split("s", 16, num_outputs=1)
    with pytest.raises(ValueError, match="policy"):
        cfg.define_split("s", 16, policy="fancy")
    cfg.define_knob("k", [1, 2])
    with pytest.raises(ValueError, match="twice"):
        cfg.define_knob("k", [3])
    with pytest.raises(KeyError, match="no knob 'nope'"):
        cfg["nope"]


def test_knobs_read_first_value_while_defining():
    cfg = ConfigSpace()
    cfg.define_knob("vec", [1, 0])
    cfg.define_split("s", 32, num_outputs=2, policy="power2")
    assert cfg["vec"].val == 1
    assert cfg["s"].size == [32, 1]


def test_config_is_plain_json_data():
    cfg = ConfigSpace()
    cfg.define_split("s", 32, num_outputs=3)
    cfg.define_reorder("r", ["x", "y"])
    cfg.define_knob("k", ["a", "b"])
    config = cfg.get(37)
    data = json.loads(json.dumps(config.to_json()))
    assert data["index"] == 37
    assert set(data["knobs"]) == {"s", "r", "k"}
    assert cfg.from_json(data) == config
    # a stale index is repaired from the knob values; an unknown choice is rejected
    assert cfg.from_json({"index": 0, "knobs": data["knobs"]}) == config
    assert cfg.from_json({"index": 1, "knobs": {**data["knobs"], "k": "zzz"}}) is None


def test_str_lists_knobs_and_size():
    cfg = ConfigSpace()
    cfg.define_split("tile_y", 512, num_outputs=2)
    cfg.define_knob("vec", [0, 1])
    text = str(cfg)
    assert "20 configs" in text and "tile_y" in text and "(10 choices)" in text and "vec" in text


def test_split_apply_performs_the_splits():
    A = te.placeholder((64, 48), name="A")
    B = te.compute((64, 48), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    cfg = ConfigSpace()
    cfg.define_split("tile_i", B.op.axis[0], num_outputs=3)
    config = cfg.get(cfg.space_map["tile_i"].index_of([2, 4, 8]))
    loops = config["tile_i"].apply(s, B, B.op.axis[0])
    assert len(loops) == 3
    assert list(s[B].leaf_iter_vars)[:3] == loops


def test_reorder_and_annotate_apply():
    A = te.placeholder((8, 8, 8), name="A")
    B = te.compute((8, 8, 8), lambda i, j, k: A[i, j, k] * 2.0, name="B")
    s = te.create_schedule(B.op)
    i, j, k = B.op.axis
    cfg = ConfigSpace()
    cfg.define_reorder("r", [i, j, k], policy="all")
    cfg.define_annotate("a", [j, k], policy="try_unroll")
    config = cfg.get(5 + 6 * 2)  # permutation 5 = (2, 1, 0); annotations ("unroll", "none")
    order = config["r"].apply(s, B, [i, j, k])
    assert order == [k, j, i] and list(s[B].leaf_iter_vars) == [k, j, i]
    assert config["a"].anns == ["unroll", "none"]
    config["a"].apply(s, B, [j, k])


def test_template_get_config_contexts():
    seen = []

    @tune.template("test/contexts")
    def tmpl(n):
        cfg = tune.get_config()
        cfg.define_knob("k", [10, 20, 30])
        seen.append(cfg["k"].val)
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
        return te.create_schedule(B.op), [A, B]

    tmpl(4)  # called directly: the default config
    task = tune.create_task("test/contexts", (4,))
    task.instantiate(2)
    task.instantiate({"index": 1, "knobs": {"k": 20}})
    assert seen == [10, 10, 30, 20]
    assert len(task.config_space) == 3
    assert isinstance(tune.get_config(), ConfigSpace)  # outside any template
