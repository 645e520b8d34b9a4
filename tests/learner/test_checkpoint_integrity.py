"""Checkpoints a crash, a bad disk or a full one can damage: every file's checksum is in the
checkpoint's manifest and checked before loading (a damaged newest checkpoint is passed over
for the newest intact one), a full disk is one line and leaves no temporary directory, a torn
metrics line is dropped, and a learner whose every trajectory is refused stops saying why."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import make_groups, tiny_model  # noqa: E402

from agentgym.durable import DiskFull, manifest_problem  # noqa: E402
from agentgym.learner import Learner, LearnerConfig, OptimConfig  # noqa: E402
from agentgym.learner.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from agentgym.learner.learner import Stalled  # noqa: E402
from agentgym.learner.metrics import MetricsWriter  # noqa: E402
from agentgym.transport import ActorChannels, Endpoints, LearnerChannels  # noqa: E402


def config(**kw) -> LearnerConfig:
    return LearnerConfig(optim=OptimConfig(lr=1e-2), groups_per_step=2, micro_batch_size=4,
                         max_staleness=100, **kw)  # fmt: skip


def damage(path: Path, at: int = 4096, n: int = 96) -> None:
    """Overwrite ``n`` bytes of ``path`` at ``at`` (the size stays), as a bad disk would."""
    with path.open("r+b") as f:
        f.seek(min(at, path.stat().st_size - n))
        f.write(bytes(255 - b for b in f.read(n)[:n]).ljust(n, b"\xff"))


def test_a_damaged_newest_checkpoint_is_passed_over_for_the_newest_intact(tmp_path, caplog):
    learner = Learner(tiny_model(), config(checkpoint_dir=str(tmp_path)))
    learner.step(make_groups(learner.model, seed=1))
    learner.save_checkpoint()
    learner.step(make_groups(learner.model, seed=2))
    newest = learner.save_checkpoint()
    damage(newest / "model.safetensors")
    assert "model.safetensors differs" in manifest_problem(newest)
    with pytest.raises(CheckpointError, match="damaged: model.safetensors differs"):
        load_checkpoint(newest, tiny_model(), learner.update.optimizer, learner.update.generator)
    resumed = Learner(tiny_model(seed=5), config(checkpoint_dir=str(tmp_path)))
    with caplog.at_level(logging.WARNING, logger="agentgym.learner"):
        resumed.load_checkpoint(tmp_path)
    assert resumed.version == 1
    assert any("step_00000002 is damaged" in r.message for r in caplog.records)
    damage(tmp_path / "step_00000001" / "optimizer.pt")
    with pytest.raises(CheckpointError, match="no intact checkpoint"):
        Learner(tiny_model(), config()).load_checkpoint(tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (root only: CI runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)]
    if os.geteuid() != 0 or subprocess.run(cmd, capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_leaves_no_temporary_checkpoint(small_disk):
    root = small_disk / "checkpoints"
    learner = Learner(tiny_model(), config(checkpoint_dir=str(root)))
    (small_disk / "filler").write_bytes(b"\0" * (200 << 10))  # most of the disk is taken
    with pytest.raises(DiskFull) as e:
        learner.save_checkpoint()
    assert "\n" not in str(e.value) and "no space left" in str(e.value)
    assert sorted(p.name for p in root.iterdir()) == []  # no .tmp_step_*, no latest


def test_a_torn_last_metrics_line_is_dropped_before_the_next_is_written(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "loss": 0.')  # killed mid-write
    writer = MetricsWriter(path)
    writer.write(2, {"loss": 0.5})
    writer.close()
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == [1, 2]


def test_a_learner_whose_every_trajectory_is_refused_stops_saying_why(tmp_path):
    learner = Learner(tiny_model(), config(max_rejected_steps=2))
    groups = make_groups(learner.model, num_groups=1, seed=3)
    for t in groups:
        t.logprobs[np.flatnonzero(t.loss_mask)[:1]] = np.nan  # what damaged weights sample
    stop = threading.Event()
    with LearnerChannels(Endpoints.ipc(tmp_path)) as channels:

        def actor() -> None:
            with ActorChannels(channels.endpoints) as a:
                while not stop.is_set():
                    a.send_trajectories(groups, timeout_s=0.5)
                    time.sleep(0.01)

        thread = threading.Thread(target=actor, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        try:
            with pytest.raises(Stalled, match="log-prob is not finite"):
                learner.run(channels, max_steps=1, should_stop=lambda: time.monotonic() > deadline)
        finally:
            stop.set()
            thread.join()
    assert time.monotonic() < deadline


def test_a_checkpoint_waits_for_a_descriptor_instead_of_failing(tmp_path):
    import resource

    learner = Learner(tiny_model(), config(checkpoint_dir=str(tmp_path)))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 32, hard))
    try:
        try:
            while True:  # what a flood of connections does to the learner's descriptors
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        release = threading.Timer(1.0, lambda: [os.close(fd) for fd in held])
        release.start()
        path = learner.save_checkpoint()
        release.join()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert manifest_problem(path) is None and (tmp_path / "latest").read_text() == path.name
