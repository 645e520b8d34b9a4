"""A real learner (tiny model) serving TCP with the run's keys, for the flood test: prints its
endpoints as one JSON line, trains ``max_steps`` updates on what actors push, writing
``metrics.jsonl`` and ``actors.json`` in RUN_DIR, and prints ``done``. The test runs it under a
small ``ulimit -n``.

    python flood_learner.py RUN_DIR MAX_STEPS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from learner_helpers import tiny_model  # noqa: E402

from agentgym.learner import Learner, LearnerConfig, OptimConfig  # noqa: E402
from agentgym.transport import Endpoints, LearnerChannels  # noqa: E402
from agentgym.transport.auth import run_keys  # noqa: E402


def main() -> None:
    run_dir, steps = Path(sys.argv[1]), int(sys.argv[2])
    keys = run_keys(run_dir, "plain")
    cfg = LearnerConfig(
        optim=OptimConfig(lr=1e-3), groups_per_step=1, micro_batch_size=4, max_staleness=4,
        metrics_path=str(run_dir / "metrics.jsonl"),
        train_order="completion",  # the test's groups carry ids of no actor's task stream
    )  # fmt: skip
    learner = Learner(tiny_model(), cfg)
    with LearnerChannels(Endpoints.tcp(), keys=keys, republish_s=0.05) as channels:
        print(json.dumps(channels.endpoints.__dict__), flush=True)
        learner.run(channels, max_steps=steps)
        print(f"done shed={channels.shed_connections}", flush=True)


if __name__ == "__main__":
    main()
