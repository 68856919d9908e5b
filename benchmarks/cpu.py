"""The CPU benchmark suite (same as `tensorforge bench`):
python benchmarks/cpu.py [--threads 1,2] [--json out.jsonl] [--target "llvm -mcpu=znver3"]

--target builds every kernel for that CPU's facts (vector width, caches) and runs it here: on an
AVX-512 host, AVX2 code (znver3) and AVX-512 code of another model (skylake-avx512) run too."""

import sys

from tensorforge.bench import bench_main

if __name__ == "__main__":
    sys.exit(bench_main(sys.argv[1:]))
