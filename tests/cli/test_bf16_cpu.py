"""bf16 on a CPU without bf16 instructions works but runs several times slower than float32:
the commands that compute with a model say so, naming the fields to turn off."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.cli import common
from agentgym.cli.common import cpu_bf16_native, slow_bf16, warn_slow_bf16
from agentgym.config import load_config

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n"


@pytest.mark.parametrize("text, native", [(AVX2, False), (ZEN4, True), (SAPPHIRE, True)])
def test_the_cpu_flags_decide_native_bf16(tmp_path, text, native):
    (tmp_path / "cpuinfo").write_text(text)
    assert cpu_bf16_native(tmp_path / "cpuinfo") is native


def test_no_cpuinfo_is_unknown_not_slow(tmp_path):
    assert cpu_bf16_native(tmp_path / "missing") is None
    config = load_config(QUICKSTART, ["learner.bf16=true", "engine.bf16=true"])
    assert slow_bf16(config, ("learner", "engine"), None) == []


def test_only_the_bf16_fields_on_a_cpu_are_named():
    on = ["learner.bf16=true", "engine.bf16=true", "sft.bf16=true"]
    config = load_config(QUICKSTART, on)
    assert slow_bf16(config, ("learner", "engine"), False) == ["learner.bf16", "engine.bf16"]
    assert slow_bf16(config, ("sft", "dpo"), False) == ["sft.bf16"]
    assert slow_bf16(config, ("learner", "engine", "sft"), True) == []
    assert slow_bf16(load_config(QUICKSTART), ("learner", "engine", "sft", "dpo"), False) == []
    on_gpu = load_config(QUICKSTART, [*on, "learner.device=cuda", "engine.device=cuda:0"])
    assert slow_bf16(on_gpu, ("learner", "engine"), False) == []


def test_the_warning_names_the_fields_and_the_fix(monkeypatch, capsys):
    config = load_config(QUICKSTART, ["learner.bf16=true", "engine.bf16=true"])
    monkeypatch.setattr(common, "cpu_bf16_native", lambda: False)
    warn_slow_bf16(config, "agentgym train", ("learner", "engine"))
    err = capsys.readouterr().err
    assert err.startswith("agentgym train: warning: learner.bf16, engine.bf16 on a CPU without")
    assert "--set learner.bf16=false --set engine.bf16=false" in err
    monkeypatch.setattr(common, "cpu_bf16_native", lambda: True)
    warn_slow_bf16(config, "agentgym train", ("learner", "engine"))
    assert capsys.readouterr().err == ""
