"""The `tensorforge` command: demo, info, tune, bench, log show."""

from __future__ import annotations

import argparse
import sys

from tensorforge.errors import TensorForgeError


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "demo": _demo,
        "info": _info,
        "tune": _tune,
        "bench": _bench,
        "log": _log,
        "ray-resources": _ray_resources,
    }
    if argv and argv[0] in ("-V", "--version"):
        print(f"tensorforge {_version()}")
        return 0
    if argv and argv[0] not in commands and argv[0] not in ("-h", "--help"):
        known = ", ".join(commands)
        print(
            f"tensorforge: unknown command {argv[0]!r}; one of: {known} (or --help)",
            file=sys.stderr,
        )
        return 2
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: tensorforge [--version] {demo,info,tune,bench,log} ...\n")
        print("  demo        declare, schedule, tune briefly and build a matmul and a fused")
        print("              element-wise kernel for this CPU; print the IR and speed beside NumPy")
        print("  info        versions, CPU target and features, CUDA availability, cache dir")
        print("  tune        tune a built-in operator or a template from a file")
        print("  bench       the benchmark suite against NumPy and the machine's limits")
        print("  log show    best records of a tuning log (and a tuning-curve plot)")
        print("  ray-resources  the Ray resources this machine offers for measuring (JSON),")
        print("              for `ray start --resources` (docs/distributed-tuning.md)")
        return 0
    try:
        return int(commands[argv[0]](argv[1:]) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except TensorForgeError as e:  # a user's mistake: one line, no traceback
        print(f"tensorforge {argv[0]}: {e}", file=sys.stderr)
        return 2


def _version() -> str:
    import tensorforge

    return tensorforge.__version__


def _demo(argv: list[str]) -> int:
    from tensorforge.demo import run_demo

    parser = argparse.ArgumentParser(prog="tensorforge demo")
    parser.add_argument("--size", type=int, default=512, help="matmul size (default 512)")
    parser.add_argument("--trials", type=int, default=16, help="tuning trials (default 16)")
    args = parser.parse_args(argv)
    return run_demo(size=args.size, trials=args.trials)


def _info(argv: list[str]) -> int:
    from tensorforge.info import print_info

    print_info()
    return 0


def _tune(argv: list[str]) -> int:
    if any(a == "--torch" or a.startswith("--torch=") for a in argv):
        from tensorforge.graph.tune_cli import main as tune_torch_main  # a model's kernels

        return tune_torch_main(argv)
    from tensorforge.tune.cli import tune_main

    return tune_main(argv)


def _bench(argv: list[str]) -> int:
    from tensorforge.bench import bench_main

    return bench_main(argv)


def _ray_resources(argv: list[str]) -> int:
    import json

    from tensorforge.tune.ray_remote import target_resource
    from tensorforge.tune.template import resolve_target

    parser = argparse.ArgumentParser(
        prog="tensorforge ray-resources",
        description="Print the Ray custom resources that let this machine measure for a target.",
    )
    parser.add_argument(
        "--target", action="append", help="target string (default: llvm, and cuda if a GPU)"
    )
    parser.add_argument("--explain", action="store_true", help="also name each resource's target")
    args = parser.parse_args(argv)
    targets = args.target or ["llvm"]
    if not args.target:
        from tensorforge.runtime.device import cuda_device_count

        try:
            gpus = cuda_device_count()
        except Exception:  # noqa: BLE001 - no driver: CPU only
            gpus = 0
        if gpus:
            targets.append("cuda")
    resources: dict[str, int] = {}
    for target in targets:
        full = resolve_target(target)
        count = 1
        if full.startswith("cuda"):
            from tensorforge.runtime.device import cuda_device_count

            count = cuda_device_count()
        resources[target_resource(full)] = count
        if args.explain:
            print(f"# {target_resource(full)} = {full}", file=sys.stderr)
    print(json.dumps(resources))
    return 0


def _log(argv: list[str]) -> int:
    if not argv or argv[0] != "show":
        print("usage: tensorforge log show FILE [--plot curve.png]")
        return 2
    from tensorforge.tune.cli import log_show_main

    return log_show_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
