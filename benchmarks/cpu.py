"""The CPU benchmark suite (same as `tensorforge bench`): python benchmarks/cpu.py [--threads 1,2] [--json out.jsonl]"""

import sys

from tensorforge.bench import bench_main

if __name__ == "__main__":
    sys.exit(bench_main(sys.argv[1:]))
