"""The learner on a CUDA GPU (``@pytest.mark.gpu``; skipped without one): a float32 update on
the GPU equals the same update on CPU, a bf16 update stays close to it with float32 master
weights, and FSDP2 at world size 1 over NCCL takes the update one process takes."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

import dist_worker  # noqa: E402
from learner_helpers import make_groups, tiny_model  # noqa: E402

from agentgym.learner import Learner, LearnerConfig, OptimConfig  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def train(device: str, steps: int = 2, bf16: bool = False) -> tuple[dict, list[dict]]:
    """``steps`` updates of the tiny model on fixed groups; its parameters (on CPU) and
    metrics."""
    base = tiny_model()
    cfg = LearnerConfig(
        optim=OptimConfig(lr=3e-3), micro_batch_size=3, minibatches=2, device=device, bf16=bf16
    )
    learner = Learner(copy.deepcopy(base), cfg)
    metrics = [learner.step(make_groups(base, 3, 4, seed=s)) for s in range(steps)]
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}  # master weights
    params = {k: v.detach().float().cpu() for k, v in learner.model.state_dict().items()}
    return params, metrics


def flat(params: dict) -> torch.Tensor:
    return torch.cat([params[k].reshape(-1) for k in sorted(params)])


def test_float32_update_on_cuda_equals_cpu() -> None:
    cpu, m_cpu = train("cpu")
    gpu, m_gpu = train("cuda")
    assert (flat(cpu) - flat(gpu)).abs().max().item() < 1e-4
    for a, b in zip(m_cpu, m_gpu, strict=True):
        assert b["loss/total"] == pytest.approx(a["loss/total"], abs=1e-4)


def test_bf16_update_on_cuda_follows_the_float32_update() -> None:
    base = flat({k: v.float() for k, v in tiny_model().state_dict().items()})
    fp32, _ = train("cuda")
    bf16, metrics = train("cuda", bf16=True)
    assert all(torch.isfinite(torch.tensor(m["loss/total"])) for m in metrics)
    want, got = flat(fp32) - base, flat(bf16) - base
    # Measured on CPU autocast: cosine 0.999, relative gap 0.04.
    assert torch.nn.functional.cosine_similarity(want, got, 0).item() > 0.9
    assert ((got - want).norm() / want.norm()).item() < 0.5


def test_fsdp2_one_nccl_rank_equals_one_process(tmp_path: Path) -> None:
    one, ranked = tmp_path / "one", tmp_path / "ranked"
    worker = Path(dist_worker.__file__)
    subprocess.run(
        [sys.executable, str(worker), str(one), "--device", "cuda"], check=True, timeout=300
    )
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
        str(worker), str(ranked), "--device", "cuda",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    a = safetensors_torch.load_file(str(one / "params.safetensors"))
    b = safetensors_torch.load_file(str(ranked / "params.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
