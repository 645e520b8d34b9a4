"""bench/gpu_check.sh as a dry run on CPU (every size shrunk): each step runs to the end and
leaves its log and figures, so the check is ready when a GPU machine is at hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
if importlib.util.find_spec("vllm") is not None:  # the dry run would run vLLM's steps too
    pytest.skip("vLLM is installed here; the CPU dry run expects none", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("gpu-tests", "quickstart", "learner", "learner-fsdp2", "learner-prefix", "engine",
         "engine-slab", "weights")  # fmt: skip


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--device", "cpu", "--out", str(out)],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    summary = (out / "summary.md").read_text()
    assert proc.returncode == 0, summary + proc.stdout[-3000:]
    for step in STEPS:
        assert f"| {step} | ok |" in summary
        assert (out / f"{step}.log").stat().st_size > 0
    # the vLLM steps run where python3 imports vLLM; elsewhere one line says why not
    assert "| vllm | skipped: python3 does not import vLLM" in summary
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    kinds = sorted(
        (r["bench"], r.get("mode") or r.get("method") or f"{r['sampler']} {r['batch']}")
        for r in rows
    )
    assert kinds == sorted([
        ("learner", "one process"), ("learner", "FSDP2, 1 rank(s)"), ("weights", "stream"),
        ("learner", "one process"), ("learner", "one process"),  # shared prefix on, off
        ("engine", "inverse-cdf 1"), ("engine", "inverse-cdf 4"),
        ("engine", "multinomial 1"), ("engine", "multinomial 4"),
        ("engine", "inverse-cdf 1"), ("engine", "inverse-cdf 4"),  # fast_decode off
    ])  # fmt: skip
    prefix = [r for r in rows if r.get("shared_tokens")]
    assert sorted(r["shared_prefix"] for r in prefix) == [False, True]
    assert sorted(r["fast_decode"] for r in rows if r["bench"] == "engine").count(False) == 2
    assert all(r.get("tokens_per_s", 1) > 0 and r.get("s", 1) > 0 for r in rows)
    assert "evaluated step 2" in (out / "quickstart.log").read_text()
