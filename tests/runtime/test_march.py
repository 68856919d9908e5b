"""-march for the C compiler: the CPU's own name where the compiler knows it, else the newest
x86-64 level the features reach plus a switch per feature (GCC 12 knows no znver4/znver5)."""

import pytest

from tensorforge.runtime.shared_lib import c_compiler, march_options, run_c_compiler

V3 = {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}
V2 = {"cx16", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"}
V4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler")


def test_a_known_cpu_is_named_as_it_is():
    assert march_options("x86-64", frozenset()) == ["-march=x86-64"]


@pytest.mark.parametrize(
    "features, level",
    [
        (V2 | V3 | V4 | {"avx512vnni", "avx512bf16"}, "x86-64-v4"),
        (V2 | V3, "x86-64-v3"),
        (V2 | V4, "x86-64-v2"),  # AVX-512 without AVX2's level: v2 and the -m switches
        ({"avx512f"}, "x86-64"),
    ],
)
def test_an_unknown_cpu_takes_the_level_its_features_reach(features, level):
    options = march_options("no-such-cpu-9", frozenset(features))
    assert options[0] == f"-march={level}"
    assert ("-mavx512f" in options) == ("avx512f" in features)
    assert "-mavx512bf16" in options or "avx512bf16" not in features
    assert "-mcx16" not in options  # not a vector feature: left to the level
    # the compiler takes the options and defines the feature macros
    source = "#ifndef __AVX512F__\n#error no avx512f\n#endif\nint f(void) { return 1; }\n"
    if "avx512f" in features:
        run_c_compiler("test", "compiling", {"f.c": source}, [*options, "-c", "f.c"], "f.o", 60)
