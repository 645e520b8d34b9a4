"""``agentgym eval CONFIG --checkpoint PATH``: success and score on held-out tasks.

Runs ``eval.samples`` (k) episodes of every task in ``tasks.eval`` and reports, per env and per
level (BabyAI: ``task_id % 40``; TextCraft: goal depth), Avg@k (mean success over all episodes),
Pass@k (share of tasks solved at least once), the mean score (episode reward) and the share of
invalid replies (no usable ``Action:`` line; the env was not called for them). PATH is a
learner checkpoint (``.../checkpoints/step_N`` or the ``checkpoints`` folder for the newest) or a
model directory (``RUN_DIR/model``: the untrained policy). It says which step it evaluated and
writes the result into the config's run dir: ``eval/step_N.json`` for the run's checkpoints,
``eval/sft_step_N.json`` for ``RUN_DIR/sft/checkpoints``, ``eval/model.json`` for the untrained
model (numbered, ``step_N-2.json``, rather than replacing a result of other settings), and to
``--out`` as well when given. Without ``--checkpoint`` it says which paths the run has.

``--policy SPEC`` plays the eval tasks with a policy without a model instead (a constant reply,
the family's scripted rule, copying the worked example, or the env's expert:
``agentgym.agent.baselines``), written to ``eval/policy_<spec>_cap<cap>.json``: the baselines a
learning figure is set beside. ``--caps 2,4,6`` evaluates under each turn cap in turn and prints the
matrix, with the share of episodes solved within each number of turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from agentgym.actor.policy import model_conflict, resolve_checkpoint
from agentgym.cli.common import add_set_arg, set_torch_threads, warn_slow_bf16
from agentgym.cli.progress import Progress, duration
from agentgym.cli.rundir import eval_out, step_of
from agentgym.cli.servers import ServerFailed, served
from agentgym.config import EnvEntry, RunConfig, load_config
from agentgym.envs.families import family
from agentgym.horizon import HorizonConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config of the run")
    add_set_arg(parser)
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="RUN_DIR/checkpoints (the trained policy, its newest step) or one step_N in it, "
        "RUN_DIR/sft/checkpoints, another model dir, or RUN_DIR/model (the untrained baseline)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="also write the JSON result here (it goes to RUN_DIR/eval/ anyway)",
    )
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N tasks")
    parser.add_argument(
        "--policy",
        default=None,
        metavar="SPEC",
        help="evaluate a policy without a model instead of a checkpoint: constant:ACTION, "
        "scripted[:NAME] (the env family's rule), copy-example, bot (agentgym.agent.baselines)",
    )
    parser.add_argument(
        "--caps",
        default=None,
        metavar="N,N,...",
        help="evaluate under each of these turn caps (a matrix: a row per cap; 'none' for "
        "uncapped) instead of eval.horizon_cap",
    )


def run(args: argparse.Namespace) -> int:
    """``agentgym eval``: prints the table, writes the JSON; returns the exit code."""
    config = load_config(args.config, args.overrides)
    try:
        caps = parse_caps(args.caps)
    except ValueError as e:
        print(f"agentgym eval: --caps: {e}", file=sys.stderr)
        return 2
    if args.policy is None:  # a scripted policy runs no model
        warn_slow_bf16(config, "agentgym eval", ("engine",))
    if caps is not None:
        return _run_matrix(args, config, caps)
    return _run_one(args, config)[0]


def _run_one(args: argparse.Namespace, config: RunConfig) -> tuple[int, dict | None]:
    """One eval (a checkpoint's or ``--policy``'s) under the config's cap: the exit code and
    the result written (None when it failed)."""
    if args.policy is not None:
        return _run_policy(args, config)
    refusal = checkpoint_refusal(args.checkpoint, Path(config.run_dir))
    if refusal is not None:
        print(f"agentgym eval: {refusal}", file=sys.stderr)
        return 2, None
    ckpt = resolve_checkpoint(args.checkpoint)
    conflict = model_conflict(config)
    if conflict is not None:  # e.g. another seed's menu model: refused before any work
        print(
            f"agentgym eval: {conflict}; evaluate with the run's own config "
            f"(agentgym eval RUN_DIR/config.yaml --checkpoint ...)",
            file=sys.stderr,
        )
        return 2, None
    step = step_of(ckpt)
    what = f"step {step} ({ckpt})" if step is not None else f"the model directory {ckpt}"
    print(f"agentgym eval: evaluating {what}", flush=True)
    config, result = _served(
        config, lambda c, progress: evaluate(c, ckpt, limit=args.limit, progress=progress)
    )
    if result is None:
        return 1, None
    ev = config.eval
    result.update(step=step, temperature=ev.temperature, top_k=ev.top_k, top_p=ev.top_p)
    result["settings"] = eval_settings(config, ckpt, args.limit)
    records = [e.pop("record") for e in result["episodes"] if "record" in e]
    outs = [result_path(eval_out(Path(config.run_dir), ckpt, step), result)]
    if args.out:
        outs.append(Path(args.out))
    for out in outs:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        write_episodes(episodes_path(out), records)
    print(format_table(result))
    print(f"evaluated {what}; written to {' and '.join(map(str, outs))}")
    return 0, result


def _served(
    config: RunConfig, run: Callable[[RunConfig, EvalProgress], dict]
) -> tuple[RunConfig, dict | None]:
    """``run`` with the config's env servers up (``env.serve``) and a progress line: the
    config as served and the result, or None when a server failed (said on stderr)."""
    progress = EvalProgress(Progress())
    try:
        with served(config, Path(config.run_dir) / "logs") as (up, _):
            return up, run(up, progress)
    except ServerFailed as e:
        print(f"agentgym eval: {e}", file=sys.stderr, flush=True)
        return config, None
    finally:
        progress.finish()


def parse_caps(text: str | None) -> list[int | None] | None:
    """``--caps 2,4,6`` as [2, 4, 6] ("none": uncapped); None when not given."""
    if text is None:
        return None
    caps: list[int | None] = []
    for part in text.split(","):
        part = part.strip().lower()
        if part == "none":
            caps.append(None)
        elif part.isdigit() and int(part) >= 1:
            caps.append(int(part))
        else:
            raise ValueError(f"{part!r} is not a cap (a whole number >= 1, or none)")
    if not caps:
        raise ValueError("no caps given")
    return caps


def _run_matrix(args: argparse.Namespace, config: RunConfig, caps: list[int | None]) -> int:
    """``--caps``: one eval per cap (each written to the run dir as a single-cap eval writes
    it; ``--out`` gets the list of them), then the matrix: a row per cap with the env's
    Avg@k, Pass@k, score and the share of episodes solved within each number of turns."""
    results = []
    for cap in caps:
        print(f"agentgym eval: cap {cap if cap is not None else 'none'}", flush=True)
        one = argparse.Namespace(**{**vars(args), "caps": None, "out": None})
        capped = replace(config, eval=replace(config.eval, horizon_cap=cap))
        code, result = _run_one(one, capped)
        if result is None:
            return code
        results.append(result)
    print(format_matrix(results))
    if args.out:  # the matrix: one result per cap, in the order of --caps
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"the matrix is written to {args.out}")
    return 0


def _one_cap(result: dict[str, Any]) -> int | None:
    """The cap of a result (a multi-env result records one per env, all the same here)."""
    cap = result["horizon_cap"]
    return next(iter(cap.values())) if isinstance(cap, dict) else cap


def format_matrix(results: list[dict[str, Any]]) -> str:
    """Rows of single-cap results of one policy: cap, Avg@k, Pass@k, score (of the env, or
    of ``macro`` for several envs), and how many of the episodes had succeeded by each turn
    (``within t``: the share solved in at most t)."""
    k = results[0]["k"]
    caps = [_one_cap(r) for r in results]
    longest = max([c for c in caps if c is not None] or [1])
    if None in caps:  # uncapped: as far as an episode went
        longest = max(longest, *(int(e.get("turns", 0)) for r in results for e in r["episodes"]))
    shown = sorted(t for t in {1, 2, 4, 6, 8, 13, *(c for c in caps if c)} if t <= longest)
    head = f"{'cap':>6}{f'avg@{k}':>9}{f'pass@{k}':>9}{'score':>8}" + "".join(
        f"{f'<={t}':>7}" for t in shown
    )
    lines = [head, "-" * len(head)]
    for r, cap in zip(results, caps, strict=True):
        row = r["rows"].get(r["env"]) or r["rows"][MACRO]
        episodes = [e for e in r["episodes"] if "error" not in e]
        within = [sum(1 for e in episodes if e.get("success") and e.get("turns", 0) <= t)
                  / max(len(episodes), 1) for t in shown]  # fmt: skip
        lines.append(
            f"{'none' if cap is None else cap:>6}{row[f'avg@{k}']:>9.3f}{row[f'pass@{k}']:>9.3f}"
            f"{row['score']:>8.3f}" + "".join(f"{w:>7.3f}" for w in within)
        )
    lines.append("<=t: share of episodes solved within t turns (what a cap of t would have kept)")
    return "\n".join(lines)


def _run_policy(args: argparse.Namespace, config: RunConfig) -> tuple[int, dict | None]:
    """``--policy SPEC``: the eval tasks played by a policy without a model
    (``agentgym.agent.baselines``); written to ``RUN_DIR/eval/policy_<spec>_cap<cap>.json``."""
    from agentgym.agent.baselines import parse_policy

    if args.checkpoint is not None:
        print("agentgym eval: --policy and --checkpoint exclude each other", file=sys.stderr)
        return 2, None
    try:
        policy = parse_policy(args.policy)
    except ValueError as e:
        print(f"agentgym eval: --policy: {e}", file=sys.stderr)
        return 2, None
    print(f"agentgym eval: evaluating the policy {policy.label}", flush=True)
    try:
        config, result = _served(
            config,
            lambda c, progress: evaluate_baseline(c, policy, limit=args.limit, progress=progress),
        )
    except ValueError as e:  # the family has no such rule, example or expert
        print(f"agentgym eval: --policy {policy.label}: {e}", file=sys.stderr, flush=True)
        return 2, None
    if result is None:
        return 1, None
    result.update(step=None, policy=policy.label)
    result["settings"] = {"policy": policy.label, "limit": args.limit,
                          "tasks": [asdict(e.tasks.eval) for e in config.entries]}  # fmt: skip
    out_dir = Path(config.run_dir) / "eval"
    cap = result["horizon_cap"]
    caps = "-".join(f"{e}{c}" for e, c in cap.items()) if isinstance(cap, dict) else cap
    outs = [result_path(out_dir / f"policy_{policy.slug}_cap{caps}.json", result)]
    if args.out:
        outs.append(Path(args.out))
    for out in outs:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
    print(format_table(result))
    print(f"evaluated the policy {policy.label}; written to {' and '.join(map(str, outs))}")
    return 0, result


def evaluate_baseline(
    config: RunConfig, policy: Any, *, limit: int | None, progress: EvalProgress | None = None
) -> dict:
    """The held-out tasks of every env played once by ``policy`` (``agentgym.agent.baselines``)
    under the eval's cap, summarised as a model's eval is (k = 1: the policies are
    deterministic)."""
    from agentgym.agent.baselines import play

    results = []
    for entry in config.entries:
        tasks = entry.tasks.eval.ids()[:limit]
        cap = config.eval.horizon_cap
        if cap is None:
            cap = final_cap(config.horizon_of(entry))
        env = entry.env.name
        pool = entry.env.pool()
        if progress is not None:
            progress.start(env, len(tasks), 1)
        on_task = (lambda ok: progress.task_done([ok], 0)) if progress is not None else None
        episodes = play(pool, env, policy, tasks, cap, _levels(env, pool, tasks), on_task)
        result = summarize(env, episodes, 1)
        result.update(horizon_cap=cap, num_tasks=len(tasks))
        results.append(result)
    return results[0] if len(results) == 1 else combine(results)


def checkpoint_refusal(checkpoint: str | None, run_dir: Path) -> str | None:
    """Why ``--checkpoint`` cannot be evaluated (not given, or no such path), with the paths the
    config's run dir offers; None when it names something."""
    if checkpoint is not None and Path(checkpoint).exists():
        return None
    head = (
        "--checkpoint is required"
        if checkpoint is None
        else f"--checkpoint {checkpoint}: no such file or directory"
    )
    choices = [
        (run_dir / "checkpoints", "the trained policy (its newest step; or one step_N in it)"),
        (run_dir / "sft" / "checkpoints", "the policy after agentgym sft"),
        (run_dir / "model", "the untrained baseline the run starts from"),
    ]
    lines = [f"  {path}  {what}{'' if path.exists() else ' (not there yet)'}"
             for path, what in choices]  # fmt: skip
    return "\n".join([f"{head}; this config's run dir offers:", *lines])


class EvalProgress:
    """The eval's progress line: tasks and episodes done of the total, success so far, elapsed
    time and ETA (``agentgym.cli.progress``: redrawn on a terminal, whole lines in a log)."""

    def __init__(self, line: Progress):
        self.line = line
        self.env, self.total, self.samples = "", 0, 0
        self.tasks = self.episodes = self.successes = self.errors = 0
        self.started = time.monotonic()

    def say(self, what: str) -> None:
        """A step before the episodes (loading the model)."""
        self.line.show(f"eval: {what}", force=True)

    def start(self, env: str, total: int, samples: int) -> None:
        """The episodes of ``env`` begin: ``total`` tasks of ``samples`` episodes each."""
        self.env, self.total, self.samples = env, total, samples
        self.tasks = self.episodes = self.successes = self.errors = 0
        self.started = time.monotonic()
        self.line.show(self.text(), force=True)

    def task_done(self, successes: list[bool], errors: int) -> None:
        """One task's episodes ended (``errors``: episodes an env failure dropped)."""
        self.tasks += 1
        self.episodes += len(successes) + errors
        self.successes += sum(successes)
        self.errors += errors
        self.line.show(self.text(), force=self.tasks == self.total)

    def text(self) -> str:
        rate = f"{self.successes / self.episodes:.3f}" if self.episodes else "-"
        elapsed = time.monotonic() - self.started
        eta = "?" if not self.tasks else duration(elapsed / self.tasks * (self.total - self.tasks))
        errors = f", {self.errors} env errors" if self.errors else ""
        return (
            f"eval {self.env}: {self.tasks}/{self.total} tasks "
            f"({self.episodes}/{self.total * self.samples} episodes), success so far {rate}"
            f"{errors}, {duration(elapsed)} elapsed, eta {eta}"
        )

    def finish(self) -> None:
        self.line.finish()


MACRO = "macro"
"""The row of a multi-env result that averages the env rows."""


def final_cap(h: HorizonConfig) -> int | None:
    """The cap a schedule ends at (what a trained policy is evaluated under)."""
    if h.schedule == "fixed":
        return h.cap
    if h.schedule == "stepwise":
        return h.rounds[-1]
    return h.max_cap


def evaluate(
    config: RunConfig,
    checkpoint: str | Path,
    *,
    limit: int | None = None,
    progress: EvalProgress | None = None,
) -> dict:
    """Run the held-out episodes; returns the JSON-able result (see ``summarize``)."""
    set_torch_threads(
        max(config.torch_threads, config.actor.torch_threads), deterministic=config.deterministic
    )
    from agentgym.actor.policy import load_trained_policy

    if progress is not None:
        progress.say("loading the policy")
    model, tokenizer, ckpt = load_trained_policy(config, checkpoint, device=config.engine.device)
    result = evaluate_policy(
        config, model, tokenizer, limit=limit, progress=progress, checkpoint=ckpt
    )
    result.update(checkpoint=str(ckpt))
    return result


def evaluate_policy(
    config: RunConfig,
    model: Any,
    tokenizer: Any,
    *,
    limit: int | None,
    progress: EvalProgress | None = None,
    checkpoint: Path | None = None,
    owns_model: bool = True,
) -> dict:
    """The held-out episodes of ``model`` as it is (the first ``limit`` tasks of each env's
    ``tasks.eval``), under ``eval.horizon_cap`` or the env's schedule's last cap; see
    ``summarize``. A multi-env run gets a row per env, per env and level, and ``macro`` (the
    mean of the env rows). ``progress`` hears of every task done. ``checkpoint``: where
    ``model``'s weights were loaded from (an engine that starts from a directory needs it).
    ``owns_model``: nothing else uses ``model`` (False for the learner's own, which the engine
    must then leave as it is: ``HFEngine``'s ``owns_model``)."""
    results = [
        _evaluate_env(config, e, model, tokenizer, limit, progress, checkpoint, owns_model)
        for e in config.entries
    ]
    if len(results) == 1:
        return results[0]
    return combine(results)


def _evaluate_env(
    config: RunConfig, entry: EnvEntry, model, tokenizer, limit, progress, ckpt, owns_model
) -> dict:
    tasks = entry.tasks.eval.ids()[:limit]
    cap = config.eval.horizon_cap
    if cap is None:
        cap = final_cap(config.horizon_of(entry))
    if progress is not None:
        progress.start(entry.env.name, len(tasks), config.eval.samples)
    episodes = asyncio.run(
        _episodes(config, entry, model, tokenizer, tasks, cap, progress, ckpt, owns_model)
    )
    result = summarize(entry.env.name, episodes, config.eval.samples)
    result.update(horizon_cap=cap, num_tasks=len(tasks))
    return result


def combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result of several envs' results: their rows (level rows as ``env: level``), then
    ``macro``, the unweighted mean of the env rows (task and episode counts summed)."""
    k = results[0]["k"]
    rows: dict[str, dict[str, float]] = {}
    for r in results:
        env = r["env"]
        rows[env] = r["rows"][env]
        rows.update({f"{env}: {name}": row for name, row in r["rows"].items() if name != env})
    envs = [r["env"] for r in results]
    macro = {
        key: (sum if key in ("tasks", "episodes", "errors") else _mean)(
            [rows[env][key] for env in envs]
        )
        for key in rows[envs[0]]
    }
    return {
        "env": "+".join(envs),
        "envs": envs,
        "k": k,
        "rows": {**rows, MACRO: macro},
        "horizon_cap": {r["env"]: r["horizon_cap"] for r in results},
        "num_tasks": sum(r["num_tasks"] for r in results),
        "episodes": [{**e, "env": r["env"]} for r in results for e in r["episodes"]],
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def eval_settings(config: RunConfig, ckpt: Path, limit: int | None) -> dict[str, Any]:
    """Everything besides the weights that decides an eval's episodes, as its result records
    it: the sampling seed, the task ranges and ``--limit``, the sampler, the reply budget,
    the engine's batching (rows sampled together see other bf16 roundings), the base model
    and tokenizer, and a hash of the evaluated weights."""
    from agentgym.actor.policy import model_dir, tokenizer_id

    ev, e = config.eval, config.engine
    return {
        "eval_seed": ev.seed,
        "tasks": [asdict(entry.tasks.eval) for entry in config.entries],
        "limit": limit,
        "samples": ev.samples,
        "temperature": e.temperature if ev.temperature is None else ev.temperature,
        "top_k": ev.top_k,
        "top_p": ev.top_p,
        "max_new_tokens": e.max_new_tokens,
        "groups_in_flight": ev.groups_in_flight,
        "max_batch_size": 1 if config.deterministic else e.max_batch_size,
        "bf16": e.bf16,
        "model": str(model_dir(config).resolve()),  # one model named one way, whatever the cwd
        "tokenizer": tokenizer_id(model_dir(config)),
        "weights": weights_hash(ckpt),
    }


def weights_hash(ckpt: Path) -> str:
    """A hash of a checkpoint's weights: its ``model.safetensors``, or a sharded checkpoint's
    ``dcp/`` files (names, sizes and the metadata's bytes)."""
    import hashlib

    digest = hashlib.blake2b(digest_size=12)
    file = ckpt / "model.safetensors"
    if file.exists():
        with open(file, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
        return digest.hexdigest()
    dcp = ckpt / "dcp"
    for part in sorted(dcp.glob("*")) if dcp.is_dir() else []:
        digest.update(f"{part.name}:{part.stat().st_size}".encode())
    if (dcp / ".metadata").exists():
        digest.update((dcp / ".metadata").read_bytes())
    return digest.hexdigest()


def _settings(result: dict[str, Any]) -> tuple:
    """What makes two results of one checkpoint comparable: the turn cap, samples, sampling
    (temperature, top-k, top-p), the tasks themselves (another level set of the same size
    is another eval) and the settings the result records (``eval_settings``: the seed, the
    task ranges, batching, the weights' hash)."""
    env = result.get("env")
    episodes = result.get("episodes")
    tasks = sorted(
        {(str(e.get("env", env)), str(e.get("task_id"))) for e in episodes if isinstance(e, dict)}
        if isinstance(episodes, list)
        else []
    )
    sampling = (result.get("temperature"), result.get("top_k", 0), result.get("top_p", 1.0))
    recorded = json.dumps(result.get("settings"), sort_keys=True)
    keys = ("horizon_cap", "num_tasks", "k")
    return (*(result.get(k) for k in keys), *sampling, tasks, recorded)


def result_path(path: Path, result: dict[str, Any]) -> Path:
    """``path``, or ``path`` numbered (``step_8-2.json``, ``step_8-3.json``...) where it holds
    an earlier result of the same checkpoint under other settings (turn cap, tasks, samples,
    sampling): that result is kept, and the same settings again replace their own."""
    candidate, n = path, 1
    while candidate.exists():
        try:
            earlier = json.loads(candidate.read_text())
        except (OSError, ValueError):
            earlier = {}
        if isinstance(earlier, dict) and _settings(earlier) == _settings(result):
            return candidate
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def episodes_path(result_path: Path) -> Path:
    """Where the episodes of the eval result at ``result_path`` go (``step_8.json`` ->
    ``step_8.episodes.jsonl``)."""
    return result_path.with_name(result_path.stem + ".episodes.jsonl")


def write_episodes(path: Path, records: list[dict[str, Any]]) -> None:
    """Each eval episode as a trajectory record (text, tokens, log-probs), one per line, in
    task order: what ``agentgym hub`` shows side by side for two checkpoints."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    tmp.replace(path)


def periodic_eval(config: RunConfig, model: Any, tokenizer: Any) -> Callable[[int], dict]:
    """For the learner: at every ``eval.every``-th version, the held-out results of its current
    weights (the first ``eval.every_tasks`` tasks of each env, the transformers engine on the
    learner's model) as ``eval/*`` metrics (``eval/<env>/*`` and ``eval/macro/*`` for several
    envs); {} at other versions."""
    hf = replace(config, engine=replace(config.engine, backend="hf"))

    def run(version: int) -> dict[str, float]:
        if config.eval.every == 0 or version % config.eval.every != 0:
            return {}
        started = time.monotonic()
        result = evaluate_policy(
            hf, model, tokenizer, limit=config.eval.every_tasks, owns_model=False
        )
        out = {"eval/s": time.monotonic() - started}
        if not config.multi_env:
            row = result["rows"][result["env"]]
            return {**{f"eval/{k}": v for k, v in row.items()}, **out}
        for name in [*result["envs"], MACRO]:
            out.update({f"eval/{name}/{k}": v for k, v in result["rows"][name].items()})
        return out

    return run


async def _episodes(
    config, entry, model, tokenizer, tasks, cap, progress, ckpt, owns_model
) -> list[dict[str, Any]]:
    from agentgym.actor.actor import trajectory_record
    from agentgym.actor.episodes import EpisodeSpec, derive_seed, run_group
    from agentgym.actor.policy import make_engine, sampling_params
    from agentgym.agent.turns import ChatCodec

    engine = make_engine(
        config, model, tokenizer, seed=config.actor.seed, checkpoint=ckpt, owns_model=owns_model
    )
    env = entry.env.name
    pool = entry.env.pool()
    codec = ChatCodec(tokenizer)
    params = sampling_params(config, evaluation=True)
    position = {t: i for i, t in enumerate(tasks)}
    levels = _levels(env, pool, tasks)
    semaphore = asyncio.Semaphore(config.eval.groups_in_flight)
    rules = config.actor.rules.for_env(env).scored_by_env()  # eval scores the env's reward

    async def one(task_id: int) -> list[dict[str, Any]]:
        spec = EpisodeSpec(
            env,
            task_id,
            task_id,
            config.eval.samples,
            cap,
            rules,
            seed=derive_seed(config.eval.seed, task_id),
        )
        async with semaphore:
            # episode ids by task and sample, whatever order the groups run in
            first = config.eval.samples * position[task_id]
            ids = iter(range(first, first + config.eval.samples))
            result = await run_group(spec, engine, pool, codec, params, ids)
        if progress is not None:
            progress.task_done([t.success for t in result.trajectories], len(result.errors))
        return [
            {
                "task_id": task_id,
                "level": levels[task_id],
                "success": t.success,
                "score": t.reward,
                "turns": t.num_turns,
                "generated_tokens": int(t.loss_mask.sum()),
                "invalid_replies": t.invalid_replies,
                "budget_cut_replies": t.budget_cut_replies,
                "record": trajectory_record(t, codec),
            }
            for t in result.trajectories
        ] + [{"task_id": task_id, "level": levels[task_id], "error": e} for e in result.errors]

    try:
        groups = await asyncio.gather(*(one(t) for t in tasks))
    finally:
        await engine.close()
    return [e for g in groups for e in g]


def _levels(env: str, pool, tasks) -> dict[int, str]:
    """The eval row of each task, by the env family's grouping (BabyAI: level; TextCraft: goal
    depth; ScienceWorld: task name)."""
    rules = family(env)
    if not rules.group_needs_info:
        return {t: rules.group(env, t, {}) for t in tasks}
    out = {}
    for t in tasks:
        (sid,) = pool.create(1)
        try:
            pool.reset([sid], [t])
            info = pool.info([sid])[0]
        finally:
            pool.close([sid])
        out[t] = rules.group(env, t, info)
    return out


def summarize(env: str, episodes: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """Avg@k, Pass@k and score for the env and per level; failed episodes count as failures."""
    by_level: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        by_level[e["level"]].append(e)
    rows = {env: _stats(episodes, k)}
    rows.update({lvl: _stats(eps, k) for lvl, eps in sorted(by_level.items())})
    return {"env": env, "k": k, "rows": rows, "episodes": episodes}


def _stats(episodes: list[dict[str, Any]], k: int) -> dict[str, float]:
    tasks: dict[int, list[bool]] = defaultdict(list)
    for e in episodes:
        tasks[e["task_id"]].append(bool(e.get("success")))
    n = max(len(episodes), 1)
    turns = max(sum(e.get("turns", 0) for e in episodes), 1)
    return {
        "tasks": len(tasks),
        "episodes": len(episodes),
        f"avg@{k}": sum(bool(e.get("success")) for e in episodes) / n,
        f"pass@{k}": sum(any(s) for s in tasks.values()) / max(len(tasks), 1),
        "score": sum(e.get("score", 0.0) for e in episodes) / n,
        "errors": sum("error" in e for e in episodes),
        "invalid": sum(e.get("invalid_replies", 0) for e in episodes) / turns,
        "invalid_budget": sum(e.get("budget_cut_replies", 0) for e in episodes) / turns,
        "tokens": sum(e.get("generated_tokens", 0) for e in episodes) / n,
    }


def format_table(result: dict[str, Any]) -> str:
    """The result as a fixed-width text table."""
    k = result["k"]
    w = max(14, *(len(name) + 2 for name in result["rows"]))
    head = (
        f"{'':<{w}}{'tasks':>7}{'episodes':>10}{f'avg@{k}':>9}{f'pass@{k}':>9}{'score':>8}"
        f"{'invalid':>9}{'budget':>8}{'tokens':>8}"
    )
    lines = [head, "-" * len(head)]
    for name, r in result["rows"].items():
        lines.append(
            f"{name:<{w}}{r['tasks']:>7}{r['episodes']:>10}{r[f'avg@{k}']:>9.3f}"
            f"{r[f'pass@{k}']:>9.3f}{r['score']:>8.3f}{r['invalid']:>9.3f}"
            f"{r.get('invalid_budget', 0.0):>8.3f}{r.get('tokens', 0.0):>8.1f}"
        )
    lines.append(
        f"avg@{k}: share of episodes that succeeded; pass@{k}: share of tasks solved at least "
        f"once in {k} tries; score: mean episode reward; invalid: share of replies without a "
        "usable action; budget: of all replies, those cut by engine.max_new_tokens before "
        "their action (counted in invalid); tokens: generated tokens per episode"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="agentgym eval")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
