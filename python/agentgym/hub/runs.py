"""The hub's view of run directories: discovery, status, metrics and sampled trajectories.

Everything here reads the files a run writes (``config.yaml``, ``metrics.jsonl``,
``trajectories.jsonl``, ``summary.json``, ``actors.json``) and never writes. Files may be
appended to while they are read: only complete lines (ending in a newline) are read, and a
reader remembers the byte offset it stopped at, so a live run is followed by reading what was
appended since (a file that has not grown is not read at all). A line longer than
``MAX_LINE_BYTES`` is a bad line, skipped without being held whole, so one huge line (an
unterminated tail included) costs neither memory nor a re-read on every poll.

Any file may be damaged (cut short, not UTF-8, the wrong shape, nested without end, a YAML
alias that refers to itself, thousands of metric names): a bad file costs only its own run the
part that needs it, and the run says why in ``problems`` (``BadFile``). Values read from files
are plain JSON trees at most ``MAX_DEPTH`` deep; a run keeps at most ``MAX_METRIC_NAMES``
metrics.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentgym.hub.groups import TaskGroups

MAX_DEPTH = 64
"""Deepest nesting of a value read from a run's files (deeper: the file or line is bad)."""
MAX_METRIC_NAMES = 2048
"""Metrics kept per run; further names in ``metrics.jsonl`` are ignored and counted."""
MAX_METRIC_NAME_CHARS = 200
MAX_FILE_BYTES = 16 << 20
"""Largest ``config.yaml``, ``summary.json``, ``actors.json`` or eval result read."""
MAX_LINE_BYTES = 4 << 20
"""Longest line of ``metrics.jsonl``, ``trajectories.jsonl`` or eval episodes read (a sampled
episode of 32k tokens takes about 1 MB); a longer one is a bad line."""

RUNNING_WITHIN_S = 60.0
"""A run without ``summary.json`` counts as running when one of its files changed this recently;
after that it is ``stopped`` (interrupted, killed, or its launcher died)."""

_ACTIVITY_FILES = ("metrics.jsonl", "trajectories.jsonl", "actors.json", "logs/learner.log")


class UnknownRun(KeyError):
    """A run id that is not one of the runs found under the hub's roots."""


class UnknownTrajectory(KeyError):
    """A trajectory index past the end of a run's samples."""


class UnknownEval(KeyError):
    """An eval result name the run does not have (or one saved without its episodes)."""


class BadFile(ValueError):
    """A run file that cannot be used: the message names the file and why."""


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` checked to be a JSON tree (dicts with string keys, lists, strings, numbers,
    booleans, None) at most ``MAX_DEPTH`` deep; ``ValueError`` otherwise. YAML's aliases can
    build a structure that contains itself, which this refuses as too deep."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels (or refers to itself)")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"a key that is not a string: {k!r:.40}")
            plain(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            plain(v, depth + 1)
    elif not (value is None or isinstance(value, str | int | float | bool)):
        raise ValueError(f"a {type(value).__name__} value")
    return value


def parse_json(data: bytes | str) -> Any:
    """JSON text as a plain tree (``plain``); ``ValueError`` for anything else (not UTF-8,
    not JSON, nested too deep)."""
    try:
        return plain(json.loads(data))
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None


def _read_bytes(path: Path) -> bytes:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise BadFile(f"{path.name}: larger than {MAX_FILE_BYTES} bytes")
    return path.read_bytes()


def read_json(path: Path) -> Any:
    """The JSON file at ``path``; ``FileNotFoundError`` when absent, ``BadFile`` when bad."""
    data = _read_bytes(path)
    try:
        return parse_json(data)
    except ValueError as e:
        raise BadFile(f"{path.name}: {e}") from None


def read_yaml(path: Path) -> Any:
    """The YAML file at ``path`` as a plain tree; ``FileNotFoundError`` when absent,
    ``BadFile`` when bad."""
    try:
        text = _read_bytes(path).decode("utf-8")
        if _flow_depth(text) > MAX_DEPTH:  # before parsing: deep nesting is slow to parse
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        return plain(yaml.load(text, Loader=_YAML_LOADER))
    except UnicodeDecodeError as e:
        raise BadFile(f"{path.name}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadFile(f"{path.name}: {reason}") from None


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _flow_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text`` (quotes aside: an upper bound for YAML)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def section(mapping: Any, *keys: str) -> Any:
    """``mapping[k1][k2]...``, None where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def scalar(value: Any, max_chars: int = 200) -> Any:
    """``value`` if it is a number, a boolean, None or a short string, else None."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= max_chars:
        return value
    return None


EPISODES_SUFFIX = ".episodes.jsonl"
"""Beside ``eval/NAME.json``: the episodes of that result (``agentgym eval`` writes both)."""


@dataclass
class LineFile:
    """Complete JSON lines of an append-only file, read incrementally and indexed by offset.

    ``offsets[i]`` is the byte offset where line ``i`` starts; lines that are not valid JSON
    objects are counted in ``bad`` (their numbers, 1-based, in ``bad_lines``, the first 20).
    """

    path: Path
    offsets: list[int] = field(default_factory=list)
    end: int = 0
    bad: int = 0
    bad_lines: list[int] = field(default_factory=list)
    lines_seen: int = 0
    size: int = -1
    """The file's size when last read (a file that has not changed is not read again)."""
    skip_from: int | None = None
    """Where the search for the end of an over-long line goes on (it began at ``end``)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def refresh(self, on_record=None) -> None:
        """Read the complete lines appended since the last call; ``on_record(i, record)`` sees
        each new valid record with its index."""
        with self.lock:
            try:
                f = open(self.path, "rb")
            except FileNotFoundError:
                return
            with f:
                size = f.seek(0, 2)
                if size == self.size:
                    return
                if size < self.end:  # the file was replaced: start over
                    self.offsets, self.end, self.bad, self.bad_lines = [], 0, 0, []
                    self.lines_seen, self.skip_from = 0, None
                self.size = size
                f.seek(self.end if self.skip_from is None else self.skip_from)
                while (line := self._next_line(f)) is not None:
                    self.lines_seen += 1
                    record = _json_object(line) if line else None
                    if record is None:
                        self.bad += 1
                        if len(self.bad_lines) < 20:
                            self.bad_lines.append(self.lines_seen)
                    else:
                        if on_record is not None:
                            on_record(len(self.offsets), record)
                        self.offsets.append(self.end)
                    self.end = f.tell()

    def _next_line(self, f) -> bytes | None:
        """The next complete line at ``f``'s position; ``b""`` for one longer than
        ``MAX_LINE_BYTES`` (read past in blocks, never held); None when the rest is not a
        complete line yet (an over-long one: where its search stopped is kept)."""
        if self.skip_from is None:
            line = f.readline(MAX_LINE_BYTES + 1)
            if line.endswith(b"\n"):
                return line
            if len(line) <= MAX_LINE_BYTES:
                return None  # being written: read it next time
            self.skip_from = f.tell()
        while block := f.read(1 << 20):
            newline = block.find(b"\n")
            if newline >= 0:
                f.seek(f.tell() - len(block) + newline + 1)
                self.skip_from = None
                return b""
        self.skip_from = f.tell()
        return None

    def read(self, index: int) -> dict[str, Any]:
        """The record of valid line ``index``."""
        with open(self.path, "rb") as f:
            f.seek(self.offsets[index])
            record = _json_object(f.readline(MAX_LINE_BYTES + 1))
        if record is None:  # the file was rewritten under us
            raise UnknownTrajectory(index)
        return record


def _json_object(line: bytes) -> dict[str, Any] | None:
    try:
        record = parse_json(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


TRAJECTORY_FIELDS = (
    "episode_id", "group_id", "env", "task_id", "horizon_cap", "reward", "success",
    "truncated", "num_turns", "num_tokens",
)  # fmt: skip


@dataclass
class Run:
    """One run directory and the incremental readers of its files."""

    id: str
    path: Path
    metrics: LineFile
    trajectories: LineFile
    columns: dict[str, list[float | None]] = field(default_factory=dict)
    """Numeric metrics by name, one entry per valid metrics line (None where a line lacks the
    metric or holds something else); ``step`` is one of them."""
    summaries: list[dict[str, Any]] = field(default_factory=list)
    """One row per valid trajectory line: the filterable fields (no tokens)."""
    tokenizer: Any = None
    tokenizer_tried: bool = False
    groups: TaskGroups | None = None
    """The group of each task (level, depth, site), from the run's config on first use."""
    problems: dict[str, str] = field(default_factory=dict)
    """What is wrong with the run's files, by file name (shown with the run)."""
    ignored_metric_names: int = 0
    """Metric names past ``MAX_METRIC_NAMES`` (or too long), not kept."""
    files: dict[str, tuple[Any, Any, str | None]] = field(default_factory=dict)
    """Per file read whole: its (mtime, size) when read, its value, its problem."""

    @classmethod
    def open(cls, run_id: str, path: Path) -> Run:
        """The run at ``path`` (a directory holding ``config.yaml``)."""
        return cls(
            run_id, path, LineFile(path / "metrics.jsonl"), LineFile(path / "trajectories.jsonl")
        )

    def config(self) -> dict[str, Any]:
        """The run's resolved config (``config.yaml``), or {} when unreadable (the reason
        goes to ``problems``)."""
        loaded = self._read("config.yaml", read_yaml)
        return loaded if isinstance(loaded, dict) else self._shape("config.yaml", loaded, {})

    def summary(self) -> dict[str, Any] | None:
        """``summary.json`` (written when the launcher ends), or None."""
        loaded = self._read("summary.json", read_json)
        return loaded if isinstance(loaded, dict) else self._shape("summary.json", loaded, None)

    def actors(self) -> Any:
        """``actors.json`` (per-actor counts the learner writes), or None."""
        return self._read("actors.json", read_json)

    def _read(self, name: str, reader) -> Any:
        """File ``name`` of the run read by ``reader`` (again only once it changed); None when
        absent or bad (the reason goes to ``problems``)."""
        path = self.path / name
        try:
            st = path.stat()
        except OSError:
            st = None
        stamp = (st.st_mtime_ns, st.st_size) if st is not None else None
        cached = self.files.get(name)
        if cached is None or cached[0] != stamp:
            cached = self.files[name] = (stamp, *_read_file(path, reader))
        _, value, problem = cached
        if problem is None:
            self.problems.pop(name, None)
        else:
            self.problems[name] = problem
        return value

    def _shape(self, name: str, value: Any, default: Any) -> Any:
        if value is not None:
            self.problems[name] = f"{name}: holds a {type(value).__name__}, not a mapping"
        return default

    def status(self, now: float | None = None) -> str:
        """running | finished | failed | stopped (see ``RUNNING_WITHIN_S``)."""
        summary = self.summary()
        if summary is not None:
            return "finished" if summary.get("exit_code") == 0 else "failed"
        now = time.time() if now is None else now
        last = max((_mtime(self.path / name) for name in _ACTIVITY_FILES), default=0.0)
        return "running" if now - last <= RUNNING_WITHIN_S else "stopped"

    def refresh_metrics(self) -> None:
        """Add the metrics lines appended since the last call to ``columns``. Work and memory
        grow with the values present, not with names x lines: a column is padded with None
        only up to the line that sets it (``column``), the rest when it is read."""

        def keep(index: int, record: dict[str, Any]) -> None:
            for key, value in record.items():
                column = self._column(key)
                if column is not None:
                    column.extend([None] * (index - len(column)))
                    column.append(_number(value))

        self.metrics.refresh(keep)
        if self.ignored_metric_names:
            self.problems["metrics.jsonl"] = (
                f"metrics.jsonl: {self.ignored_metric_names} metric name(s) ignored (over "
                f"{MAX_METRIC_NAMES} names, or over {MAX_METRIC_NAME_CHARS} characters)"
            )

    def _column(self, key: str) -> list[float | None] | None:
        column = self.columns.get(key)
        if column is None:
            if len(self.columns) >= MAX_METRIC_NAMES or len(key) > MAX_METRIC_NAME_CHARS:
                self.ignored_metric_names += 1
                return None
            column = self.columns[key] = []
        return column

    def column(self, key: str, start: int, stop: int) -> list[float | None]:
        """Values of metric ``key`` on valid lines ``start`` to ``stop`` (None where a line
        lacks it)."""
        got = self.columns[key][start:stop]
        return got + [None] * (max(0, stop - start) - len(got))

    def overview(self) -> dict[str, Any]:
        """What the runs list shows of this run (``problems``: what is wrong with its files)."""
        self.refresh_metrics()
        config = self.config()
        return {
            "id": self.id,
            "path": str(self.path),
            "status": self.status(),
            "steps": len(self.metrics.offsets),
            "max_steps": scalar(section(config, "learner", "max_steps")),
            "env": scalar(section(config, "env", "name")),
            "algorithm": scalar(section(config, "learner", "advantage", "estimator")),
            "updated": max((_mtime(self.path / n) for n in _ACTIVITY_FILES), default=None),
            "problems": sorted(self.problems.values()),
        }

    def metrics_since(self, start: int, keys: list[str] | None) -> dict[str, Any]:
        """The metrics ``keys`` (all when None) from valid line ``start`` on, as columns, with
        every metric name the run has and the index to ask from next time. Names the run does
        not have are listed in ``unknown`` and get no column."""
        self.refresh_metrics()
        stop = len(self.metrics.offsets)
        wanted = sorted(self.columns) if keys is None else keys
        return {
            "keys": sorted(self.columns),
            "columns": {k: self.column(k, start, stop) for k in wanted if k in self.columns},
            "unknown": [k for k in wanted if k not in self.columns],
            "start": start,
            "next": stop,
            "bad_lines": self.metrics.bad,
            "first_bad_lines": list(self.metrics.bad_lines),
        }

    def evals(self) -> list[dict[str, Any]]:
        """The run's ``agentgym eval`` results (``eval/*.json``), ordered by step, without
        their per-episode lists; unreadable files are listed with an error."""
        out = []
        for path in sorted((self.path / "eval").glob("*.json")):
            try:
                result = read_json(path)
                rows = section(result, "rows")
                if not isinstance(rows, dict):
                    raise BadFile(f'{path.name}: no "rows" object')
            except (OSError, BadFile) as e:
                out.append({"name": path.stem, "error": str(e)})
                continue
            step = result.get("step")
            step = step if isinstance(step, int) and not isinstance(step, bool) else None
            episodes = path.with_name(path.stem + EPISODES_SUFFIX).exists()
            out.append({"name": path.stem, "step": step, "env": scalar(result.get("env")),
                        "k": scalar(result.get("k")), "rows": rows,
                        "has_episodes": episodes})  # fmt: skip
        return sorted(out, key=lambda e: (e.get("step") is None, e.get("step") or 0, e["name"]))

    def eval_episodes(self, name: str, task_id: int | None) -> dict[str, Any]:
        """The episodes ``agentgym eval`` kept for result ``name`` (``eval/NAME.episodes.jsonl``):
        without ``task_id``, each task with its samples' outcomes; with it, that task's
        episodes split into turns (as ``trajectory``)."""
        names = {p.stem for p in (self.path / "eval").glob("*.json")}
        path = self.path / "eval" / (name + EPISODES_SUFFIX)
        if name not in names or not path.exists():  # names come from the listing only
            raise UnknownEval(name)
        records, bad = [], 0
        with open(path, "rb") as f:
            while line := f.readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES:  # the rest of an over-long line: skipped
                    while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                        pass
                    bad += 1
                    continue
                record = _json_object(line)
                if record is None:
                    bad += 1
                else:
                    records.append(record)
        if task_id is None:
            tasks: dict[Any, dict[str, Any]] = {}
            for r in records:
                task = scalar(r.get("task_id"))
                t = tasks.setdefault(
                    task, {"task_id": task, "env": scalar(r.get("env")), "success": []}
                )
                t["success"].append(bool(r.get("success")))
            return {"tasks": list(tasks.values()), "bad_lines": bad}
        config = self.config()
        reply_format = _reply_format(config)
        tokenizer = self._tokenizer(config)
        out = []
        for r in records:
            if r.get("task_id") != task_id:
                continue
            ep = {k: v for k, v in r.items() if k not in ("tokens", "loss_mask", "logprobs")}
            ep["turns"] = safe_turns(r, tokenizer, reply_format)
            out.append(ep)
        return {"episodes": out, "bad_lines": bad}

    def refresh_trajectories(self) -> None:
        """Index the trajectory samples appended since the last call."""

        def keep(index: int, record: dict[str, Any]) -> None:
            row = {k: scalar(record.get(k)) for k in TRAJECTORY_FIELDS}
            versions = record.get("versions")
            if not (isinstance(versions, list) and all(_is_int(v) for v in versions)):
                versions = []
            row["index"] = index
            row["version_min"] = min(versions) if versions else None
            row["version_max"] = max(versions) if versions else None
            row["group"] = groups.group(row["env"], row["task_id"])
            self.summaries.append(row)

        if self.groups is None:
            self.groups = TaskGroups(self.config())
        groups = self.groups

        self.trajectories.refresh(keep)

    def trajectory(self, index: int) -> dict[str, Any]:
        """One sampled episode, split into turns for replay (see ``turns``)."""
        self.refresh_trajectories()
        if not 0 <= index < len(self.trajectories.offsets):
            raise UnknownTrajectory(index)
        record = self.trajectories.read(index)
        config = self.config()
        reply_format = _reply_format(config)
        out = {k: v for k, v in record.items() if k not in ("tokens", "loss_mask", "logprobs")}
        out["index"] = index
        out["turns"] = safe_turns(record, self._tokenizer(config), reply_format)
        if out["turns"]:
            out.pop("text", None)  # the turns hold it
        return out

    def _tokenizer(self, config: dict[str, Any]) -> Any:
        if not self.tokenizer_tried:
            self.tokenizer_tried = True
            self.tokenizer = load_tokenizer(self.path, config)
        return self.tokenizer


def _read_file(path: Path, reader) -> tuple[Any, str | None]:
    """(value, None), or (None, why) for a file that is there but cannot be used."""
    try:
        return reader(path), None
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{path.name}: {e.strerror or e}"
    except BadFile as e:
        return None, str(e)


def _reply_format(config: dict[str, Any]) -> str:
    value = section(config, "actor", "reply_format")
    return value if isinstance(value, str) else "action_line"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _number(value: Any) -> float | None:
    """A metric value as a finite float, or None (strings, lists, NaN, infinities)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def load_tokenizer(run_dir: Path, config: dict[str, Any]) -> Any:
    """The run's tokenizer (``tokenizers``), from the model it built or its ``model.path``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    model_path = section(config, "model", "path")
    candidates = [run_dir / "model" / "tokenizer.json"]
    if isinstance(model_path, str) and model_path:
        candidates.append(Path(model_path) / "tokenizer.json")
    for candidate in candidates:
        if candidate.is_file():
            try:
                return Tokenizer.from_file(str(candidate))
            except Exception:  # noqa: BLE001 - a damaged file is shown as "no tokenizer"
                continue
    return None


def safe_turns(record: dict[str, Any], tokenizer: Any, reply_format: str) -> list[dict[str, Any]]:
    """``turns``, or none when the tokenizer cannot decode the record's tokens (ids outside
    its vocabulary, say): the record is then shown as its text."""
    try:
        return turns(record, tokenizer, reply_format)
    except Exception:  # noqa: BLE001 - a tokenizer's errors on bad ids are of any type
        return []


def turns(record: dict[str, Any], tokenizer: Any, reply_format: str) -> list[dict[str, Any]]:
    """The episode as alternating context and reply turns.

    Replies are the runs of loss-masked tokens (what the model generated); the text between
    them is what the model was shown (observations inside the chat template). Each reply carries
    its tokens as strings with their behaviour log-probs (when the sample recorded them) and the
    action the actor's parser reads from it, or the parser's corrective message.
    """
    tokens, mask = record.get("tokens"), record.get("loss_mask")
    if tokenizer is None or not _token_record(tokens, mask):
        return []
    from agentgym.actor.episodes import parse_reply

    logprobs = record.get("logprobs")
    if not (isinstance(logprobs, list) and all(_is_number(x) for x in logprobs)):
        logprobs = []
    out: list[dict[str, Any]] = []
    for start, stop, generated in _spans(mask):
        text = tokenizer.decode(tokens[start:stop], skip_special_tokens=False)
        if not generated:
            out.append({"kind": "context", "text": text})
            continue
        pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in tokens[start:stop]]
        reply = tokenizer.decode(tokens[start:stop], skip_special_tokens=True)
        parsed = parse_reply(reply, str(record.get("env", "")), reply_format)
        out.append({
            "kind": "reply", "text": text, "pieces": pieces,
            "logprobs": logprobs[start:stop] if len(logprobs) == len(tokens) else None,
            "action": parsed.action, "error": parsed.error,
        })  # fmt: skip
    return out


def _token_record(tokens: Any, mask: Any) -> bool:
    """Whether a record's tokens and loss mask can be replayed: lists of the same length of
    non-negative ints and of 0/1."""
    return (
        isinstance(tokens, list)
        and isinstance(mask, list)
        and 0 < len(tokens) == len(mask)
        and all(_is_int(t) and 0 <= t < 1 << 32 for t in tokens)
        and all(m in (0, 1) and not isinstance(m, float) for m in mask)
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _spans(mask: list[int]) -> Iterator[tuple[int, int, bool]]:
    start = 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or bool(mask[i]) != bool(mask[start]):
            yield start, i, bool(mask[start])
            start = i


def matches(row: dict[str, Any], filters: dict[str, str]) -> bool:
    """Whether a trajectory row passes the filters (exact values; version is a range test)."""
    for key, want in filters.items():
        if key == "version":
            lo, hi = row.get("version_min"), row.get("version_max")
            if lo is None or not lo <= int(want) <= hi:
                return False
        elif key in ("success", "truncated"):
            if bool(row.get(key)) != (want.lower() in ("1", "true", "yes")):
                return False
        elif str(row.get(key)) != want:
            return False
    return True


FILTERS = ("env", "task_id", "success", "truncated", "horizon_cap", "version", "group")


class RunIndex:
    """The runs found under a set of root directories, by id (their path under the root).

    Ids come from the hub's own discovery: a request names a run by id and never by path, so
    nothing outside the roots can be reached.
    """

    def __init__(self, roots: Iterable[Path]):
        self.roots = [Path(r).resolve() for r in roots]
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    def scan(self) -> list[Run]:
        """Find run directories (holding ``config.yaml`` and ``metrics.jsonl`` or
        ``summary.json``) under the roots, in a stable order."""
        found: dict[str, Path] = {}
        for k, root in enumerate(self.roots):
            for path in _run_dirs(root):
                rel = path.relative_to(root).as_posix() if path != root else root.name
                run_id = f"{k}/{rel}" if len(self.roots) > 1 else rel
                found[run_id] = path
        with self._lock:
            for run_id, path in found.items():
                if run_id not in self._runs:
                    self._runs[run_id] = Run.open(run_id, path)
            for gone in set(self._runs) - set(found):
                del self._runs[gone]
            return [self._runs[k] for k in sorted(self._runs)]

    def get(self, run_id: str) -> Run:
        """The run with this id (rescanning once for a run that appeared since)."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is None:
            self.scan()
            with self._lock:
                run = self._runs.get(run_id)
        if run is None:
            raise UnknownRun(run_id)
        return run


def _run_dirs(root: Path, depth: int = 4) -> Iterator[Path]:
    """Run directories at most ``depth`` levels below ``root`` (symlinks are not followed)."""
    if not root.is_dir():
        return
    if _is_run(root):
        yield root
        return
    if depth == 0:
        return
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return
    for child in children:
        yield from _run_dirs(child, depth - 1)


def _is_run(path: Path) -> bool:
    has_config = (path / "config.yaml").is_file()
    return has_config and ((path / "metrics.jsonl").exists() or (path / "summary.json").exists())
