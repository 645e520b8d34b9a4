"""Mutation testing of the training path: apply each mutant of ``mutants.py`` to a copy of the
package and run the fast tests meant to catch it.

    python tests/mutation/run.py                      # every mutant (~10-20 min on 2 cores)
    python tests/mutation/run.py --only "Pass@k"      # mutants whose name contains a text
    python tests/mutation/run.py --results m.jsonl    # resumable: done mutants are skipped

The checkout is never modified: ``python/agentgym`` is copied to a temporary directory (with
the native module of the installed package when the checkout has none), one file is changed
there, and pytest runs this checkout's tests with that copy first on ``PYTHONPATH`` (``-x``:
the first failing test kills the mutant). Prints a line per mutant as it goes and, at the end,
a Markdown table and the kill rate (docs/testing.md keeps the last run's). Exit code 1 when a
mutant survives or is stale (its snippet is no longer in the code).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutants import MUTANTS, SUITES, Mutant  # noqa: E402


@dataclass(frozen=True)
class Outcome:
    """What the tests did to one mutant."""

    name: str
    status: str
    """killed, survived, timeout (counted as killed: the tests did not pass) or stale."""
    killer: str
    """The first failing test (killed), or why (stale, timeout)."""
    seconds: float


def copy_package(dest: Path) -> Path:
    """``python/agentgym`` under ``dest/python``, with a native module; returns the package."""
    package = dest / "python" / "agentgym"
    shutil.copytree(ROOT / "python" / "agentgym", package,
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    if not list(package.glob("_envserver*.so")):
        native = subprocess.run(
            [sys.executable, "-c", "import agentgym._envserver as m; print(m.__file__)"],
            capture_output=True, text=True, cwd=tempfile.gettempdir(), check=True,
        ).stdout.strip()  # fmt: skip
        shutil.copy2(native, package)
    return package


def run_tests(mutant: Mutant, python_dir: Path, timeout_s: float) -> tuple[str, str]:
    """(status, first failing test) of the mutant's suite against the copy."""
    env = {**os.environ, "PYTHONPATH": str(python_dir), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", ".", "-x", "-q",
           "-m", "not slow", "-p", "no:cacheprovider", *SUITES[mutant.suite]]  # fmt: skip
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "timeout", f"tests ran past {timeout_s:.0f} s"
    if proc.returncode == 0:
        return "survived", ""
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    return "killed", failed[0] if failed else f"pytest exit {proc.returncode}"


def apply(mutant: Mutant, package: Path) -> str | None:
    """Write the mutant into the copy; returns the original text (None: stale snippet)."""
    path = package / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        return None
    path.write_text(text.replace(mutant.old, mutant.new))
    return text


def run_one(mutant: Mutant, package: Path, timeout_s: float) -> Outcome:
    start = time.monotonic()
    original = apply(mutant, package)
    if original is None:
        return Outcome(mutant.name, "stale", f"snippet not found once in {mutant.path}", 0.0)
    try:
        status, killer = run_tests(mutant, package.parent, timeout_s)
    finally:
        (package / mutant.path).write_text(original)
    return Outcome(mutant.name, status, killer, time.monotonic() - start)


def report(outcomes: list[Outcome]) -> str:
    """A Markdown table of the outcomes and the kill rate."""
    lines = ["| mutant | file | result | first failing test |", "|---|---|---|---|"]
    paths = {m.name: m.path for m in MUTANTS}
    for o in outcomes:
        result = "**survived**" if o.status == "survived" else o.status
        lines.append(
            f"| {o.name} | `{paths.get(o.name, '?')}` | {result} | `{o.killer}` |"
            if o.killer
            else f"| {o.name} | `{paths.get(o.name, '?')}` | {result} | |"
        )
    killed = sum(o.status in ("killed", "timeout") for o in outcomes)
    live = [o for o in outcomes if o.status != "stale"]
    lines.append("")
    lines.append(
        f"Killed {killed} of {len(live)} ({100 * killed / max(len(live), 1):.0f}%); "
        f"survived: {', '.join(o.name for o in live if o.status == 'survived') or 'none'}"
        + (f"; stale: {len(outcomes) - len(live)}" if len(live) < len(outcomes) else "")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run the mutants whose name contains this text (repeatable)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="JSON lines of outcomes: appended to, and mutants already in it "
        "are not run again (resume an interrupted run)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds one mutant's tests may take (default 900)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or any(s in m.name for s in args.only)]
    if args.list:
        for m in chosen:
            print(f"{m.name}  [{m.path}; {m.suite}]")
        return 0
    done: dict[str, Outcome] = {}
    if args.results is not None and args.results.exists():
        for line in args.results.read_text().splitlines():
            o = Outcome(**json.loads(line))
            done[o.name] = o
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="agentgym-mutants-") as tmp:
        package = copy_package(Path(tmp))
        for i, mutant in enumerate(chosen, 1):
            if mutant.name in done:
                outcomes.append(done[mutant.name])
                continue
            outcome = run_one(mutant, package, args.timeout)
            outcomes.append(outcome)
            print(f"[{i}/{len(chosen)}] {outcome.status:8} {outcome.seconds:6.1f} s  "
                  f"{mutant.name}  {outcome.killer}", flush=True)  # fmt: skip
            if args.results is not None:
                with open(args.results, "a") as f:
                    f.write(json.dumps(outcome.__dict__) + "\n")
    print()
    print(report(outcomes))
    return 1 if any(o.status in ("survived", "stale") for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
