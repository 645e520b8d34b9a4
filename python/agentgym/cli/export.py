"""``agentgym export CONFIG --checkpoint CKPT --out DIR``: a checkpoint as a Hugging Face model.

Writes DIR with the policy's weights (safetensors), its config and its tokenizer, loadable by
``transformers.AutoModelForCausalLM.from_pretrained(DIR)``, by vLLM and by ``agentgym eval
--checkpoint DIR``. Takes either kind of learner checkpoint (one-process safetensors, or the
sharded DCP checkpoint of a torchrun learner, read in one process). A menu policy exports the
language model it wraps; the menu restriction is applied by agentgym when it samples.

Weights are written in the dtype of the model the run started from (``--dtype auto``: a
bfloat16 checkpoint exports as bfloat16, the tiny model as float32), whatever dtype training
kept them in; ``--dtype`` names another.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentgym.cli.common import add_set_arg, set_torch_threads
from agentgym.config import RunConfig, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config of the run that wrote the checkpoint")
    add_set_arg(parser)
    parser.add_argument(
        "--checkpoint", required=True, help="learner checkpoint dir or a checkpoints folder"
    )
    parser.add_argument("--out", required=True, help="model directory to write")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace --out if it holds files already"
    )
    parser.add_argument(
        "--dtype", choices=("auto", *DTYPES), default="auto",
        help="dtype of the written weights (auto: the dtype of the model the run started from)",
    )  # fmt: skip


DTYPES = ("float32", "bfloat16", "float16")


def run(args: argparse.Namespace) -> int:
    """``agentgym export``: writes the model directory; returns the exit code."""
    config = load_config(args.config, args.overrides)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise SystemExit(f"{out} is not empty; pass --overwrite to replace what it holds")
    info = export(config, args.checkpoint, out, dtype=args.dtype)
    print(f"exported {info['checkpoint']} (version {info['version']}, {info['dtype']}) to {out}")
    return 0


def export(
    config: RunConfig, checkpoint: str | Path, out: str | Path, *, dtype: str = "auto"
) -> dict[str, Any]:
    """Write ``checkpoint``'s policy as a Hugging Face model directory; returns what was
    exported (also written to ``agentgym_export.json`` in it). ``dtype``: one of ``DTYPES``,
    or ``auto`` for the dtype of the model the run started from."""
    set_torch_threads(config.torch_threads)
    import torch

    from agentgym.actor.policy import load_trained_policy, model_dir

    model, tokenizer, ckpt = load_trained_policy(config, checkpoint)
    name = base_dtype(model_dir(config)) if dtype == "auto" else dtype
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from agentgym.models import no_progress_bars

    no_progress_bars()
    lm = getattr(model, "lm", model).to(getattr(torch, name))
    lm.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    state = ckpt / "state.json"
    version = json.loads(state.read_text())["version"] if state.exists() else None
    info = {"checkpoint": str(ckpt), "version": version, "dtype": name,
            "menu_policy": config.model.menu_policy}  # fmt: skip
    (out / "agentgym_export.json").write_text(json.dumps(info, indent=1))
    return info


def base_dtype(directory: str | Path) -> str:
    """The weights' dtype a model directory's ``config.json`` records (``dtype``, or
    ``torch_dtype`` as older transformers write it); float32 where it records none or one
    export does not write."""
    try:
        cfg = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return "float32"
    name = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32").removeprefix("torch.")
    return name if name in DTYPES else "float32"
