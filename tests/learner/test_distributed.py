"""The learner under torchrun (2 gloo ranks, FSDP2) against one process on the same batches."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

import dist_worker  # noqa: E402
from learner_helpers import tiny_model  # noqa: E402

from agentgym.learner import Learner  # noqa: E402

WORKER = Path(dist_worker.__file__)


def torchrun(out: Path, *args: str, ranks: int = 2, timeout: float = 240) -> int:
    """Run the worker on ``ranks`` gloo ranks; returns torchrun's exit code."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={ranks}", str(WORKER), str(out), *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a crashing rank shows its Python stack
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode == 0:
        assert (out / "params.safetensors").exists()
    else:
        print(proc.stderr[-4000:])  # shown by pytest when the test fails
    return proc.returncode


def params(out: Path) -> dict:
    return safetensors_torch.load_file(str(out / "params.safetensors"))


def assert_same_params(a: Path, b: Path, atol: float) -> None:
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys()
    worst = max((pa[k] - pb[k]).abs().max().item() for k in pa)
    assert worst <= atol, f"parameters differ by {worst}"


def metrics(out: Path) -> list[dict]:
    return json.loads((out / "metrics.json").read_text())


# Metrics that are global sums or maxima over the update's rows; the IS effective sample
# size is a mean of per-micro-batch values and depends on how rows fall into micro-batches.
GLOBAL_METRICS = (
    "loss/total", "loss/policy", "loss/value", "loss/entropy", "clip_fraction",
    "is_weight_mean", "is_weight_max", "grad_norm", "tokens", "reward/all",
)  # fmt: skip


def one_process(out: Path, estimator: str, **kw) -> None:
    dist_worker.train(out, estimator, 3, **kw)


@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_two_ranks_take_the_same_updates_as_one_process(tmp_path, estimator):
    """PPO-style updates (2 epochs x 2 minibatches, uneven micro-batches per rank), 3 steps;
    gae adds the value head: parameters and global metrics agree within float tolerance."""
    one_process(tmp_path / "one", estimator)
    assert torchrun(tmp_path / "two", "--estimator", estimator) == 0
    assert_same_params(tmp_path / "one", tmp_path / "two", atol=2e-5)
    for m1, m2 in zip(metrics(tmp_path / "one"), metrics(tmp_path / "two"), strict=True):
        for key in GLOBAL_METRICS:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-5), key


def test_two_ranks_on_shared_prefixes_take_the_updates_of_whole_episodes(tmp_path):
    """Groups whose episodes share their first 6 tokens (the 4-token prompt and the start of
    the first reply): 2 ranks running each group's prefix once (packed micro-batches) take the
    updates one process takes running every episode whole."""
    one_process(tmp_path / "one", "grpo", opening=6, shared_prefix=False)
    assert torchrun(tmp_path / "two", "--estimator", "grpo", "--opening", "6") == 0
    assert_same_params(tmp_path / "one", tmp_path / "two", atol=2e-5)
    for m1, m2 in zip(metrics(tmp_path / "one"), metrics(tmp_path / "two"), strict=True):
        for key in GLOBAL_METRICS:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-5), key


def test_sharded_checkpoint_resumes_on_one_and_on_two_ranks(tmp_path):
    """A 2-rank checkpoint after step 2, resumed in one process and on 2 ranks: step 3 equals
    the uninterrupted 2-rank run's."""
    assert torchrun(tmp_path / "full", "--estimator", "gae", "--save-at", "2") == 0
    ckpt = tmp_path / "full" / "checkpoints"
    assert (ckpt / "step_00000002" / "dcp" / ".metadata").exists()
    one_process(tmp_path / "r1", "gae", resume=str(ckpt))
    assert torchrun(tmp_path / "r2", "--estimator", "gae", "--resume", str(ckpt)) == 0
    assert_same_params(tmp_path / "full", tmp_path / "r1", atol=2e-5)
    assert_same_params(tmp_path / "full", tmp_path / "r2", atol=2e-5)
    assert metrics(tmp_path / "r1")[0]["version"] == 3


@pytest.mark.parametrize("ranks", [1, 2])
def test_mismatched_checkpoint_is_refused_naming_the_difference(tmp_path, ranks):
    """Another vocabulary size: refused before anything is loaded, for a one-process
    (safetensors) and a sharded (DCP) checkpoint."""
    if ranks == 1:
        dist_worker.train(tmp_path / "run", "grpo", 1, save_at=1)
    else:
        assert torchrun(tmp_path / "run", "--steps", "1", "--save-at", "1") == 0
    from transformers import LlamaConfig, LlamaForCausalLM

    other = LlamaForCausalLM(LlamaConfig(**{**tiny_model().config.to_dict(), "vocab_size": 50}))
    learner = Learner(other, dist_worker.learner_config("grpo", None))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    expected = r"(embed_tokens|lm_head).weight is \(48, 32\) there, \(50, 32\) here"
    with pytest.raises(ValueError, match=expected):
        learner.load_checkpoint(tmp_path / "run" / "checkpoints")
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    assert learner.version == 0


def test_one_process_writes_and_eval_reads_sharded_policy(tmp_path):
    """The policy of a one-process DCP checkpoint loads through the eval path."""
    from agentgym.actor.policy import load_weights_file, resolve_checkpoint

    assert torchrun(tmp_path / "run", "--steps", "1", "--save-at", "1") == 0
    ckpt = resolve_checkpoint(tmp_path / "run" / "checkpoints")
    model = tiny_model(seed=5)
    load_weights_file(model, ckpt)
    trained = params(tmp_path / "run")
    for name, value in model.state_dict().items():
        if name in trained:
            assert torch.equal(value, trained[name]), name


def test_a_dead_rank_ends_the_run_with_an_error_not_a_hang(tmp_path):
    start = time.monotonic()
    code = torchrun(tmp_path / "dead", "--die-at", "1", timeout=120)
    assert code != 0
    assert time.monotonic() - start < 90
