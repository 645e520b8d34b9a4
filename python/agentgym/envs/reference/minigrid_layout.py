"""Export live minigrid BabyAI worlds to agentgym's BabyAI layout JSON, and read back the
state that parity tests compare.

The layout format is documented in ``rust/envserver/src/envs/babyai/layout.rs``. An export
taken right after ``reset`` carries the grid, the agent, what it carries, the mission, the
step limit and the instruction tree with the objects minigrid's verifier matched, so the
Rust env (``EnvPool("babyai", layout=...)``) starts from exactly minigrid's episode.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the BabyAI levels with gymnasium)
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    AndInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

LAYOUT_FORMAT = "agentgym-babyai-layout/1"

# Level names AgentGym uses whose env minigrid 3.x registers under another id: minigrid 2.3.1,
# which AgentGym pins, builds GoToObjS6-v0 with room_size=4, as 3.x's GoToObjS4-v0.
_RENAMED = {"BabyAI-GoToObjS6-v0": "BabyAI-GoToObjS4-v0"}

ACTIONS = ("left", "right", "forward", "pickup", "drop", "toggle", "done")


def make_level(name: str) -> Any:
    """The unwrapped minigrid env for a BabyAI level id (AgentGym's names accepted)."""
    return gym.make(_RENAMED.get(name, name)).unwrapped


def reset_quietly(env: Any, seed: int) -> None:
    """``env.reset(seed=seed)`` without minigrid's prints about rejected samples."""
    with contextlib.redirect_stdout(io.StringIO()):
        env.reset(seed=seed)


def reset_like_agentgym(env: Any, seed: int) -> None:
    """Reset ``env`` (fresh from ``gymnasium.make``) as AgentGym's BabyAI server does: twice with
    ``seed``, under minigrid 2.3.1, the version it pins. There ``LevelGen.locked_room`` outlives
    every attempt and reset, and ``rand_obj`` (without implicit unlocking) keeps instructions
    off the room an earlier attempt locked; minigrid 3.x clears it at each mission, so on 3.x
    the last locked room is put back for ``rand_obj`` whenever the attempt has none."""
    level = env.unwrapped
    if hasattr(level, "add_locked_room") and not hasattr(level, "_agentgym_kept_room"):
        _keep_locked_room(level)
    reset_quietly(env, seed)
    reset_quietly(env, seed)


def _keep_locked_room(level: Any) -> None:
    add_locked_room, rand_obj = level.add_locked_room, level.rand_obj
    level._agentgym_kept_room = None

    def add(*args: Any, **kwargs: Any) -> Any:
        try:
            return add_locked_room(*args, **kwargs)
        finally:  # the last room drawn, also when the attempt is then rejected
            level._agentgym_kept_room = level.locked_room

    def rand(*args: Any, **kwargs: Any) -> Any:
        if level.locked_room is None:
            level.locked_room = level._agentgym_kept_room
        return rand_obj(*args, **kwargs)

    level.add_locked_room, level.rand_obj = add, rand


class _Ids:
    """Stable small ids for minigrid objects, by Python identity."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}
        self._keep: list[Any] = []  # keeps objects alive so id() values stay unique

    def of(self, obj: Any) -> int:
        key = id(obj)
        if key not in self._ids:
            self._ids[key] = len(self._ids) + 1
            self._keep.append(obj)
        return self._ids[key]


def _obj(obj: Any, ids: _Ids) -> dict[str, Any] | None:
    if obj is None:
        return None
    out: dict[str, Any] = {"id": ids.of(obj), "type": obj.type, "color": obj.color}
    if obj.type == "door":
        out["is_open"] = bool(obj.is_open)
        out["is_locked"] = bool(obj.is_locked)
    if obj.type == "box":
        out["contains"] = _obj(obj.contains, ids)
    return out


def _desc(desc: ObjDesc, ids: _Ids) -> dict[str, Any]:
    return {
        "type": desc.type,
        "color": desc.color,
        "loc": desc.loc,
        "obj_set": [ids.of(o) for o in desc.obj_set],
        "obj_poss": [[int(x), int(y)] for x, y in desc.obj_poss],
    }


def _instr(instr: Any, ids: _Ids) -> dict[str, Any]:
    if isinstance(instr, GoToInstr):
        return {"op": "goto", "desc": _desc(instr.desc, ids)}
    if isinstance(instr, OpenInstr):
        return {"op": "open", "desc": _desc(instr.desc, ids), "strict": bool(instr.strict)}
    if isinstance(instr, PickupInstr):
        return {"op": "pickup", "desc": _desc(instr.desc, ids), "strict": bool(instr.strict)}
    if isinstance(instr, PutNextInstr):
        return {
            "op": "putnext",
            "desc_move": _desc(instr.desc_move, ids),
            "desc_fixed": _desc(instr.desc_fixed, ids),
            "strict": bool(instr.strict),
        }
    for cls, op in ((AndInstr, "and"), (BeforeInstr, "before"), (AfterInstr, "after")):
        if isinstance(instr, cls):
            parts = {"a": _instr(instr.instr_a, ids), "b": _instr(instr.instr_b, ids)}
            return {"op": op, **parts, "strict": bool(instr.strict)}
    raise TypeError(f"unknown BabyAI instruction {type(instr).__name__}")


def export_layout(env: Any) -> dict[str, Any]:
    """The world of a minigrid BabyAI env, freshly reset, as a layout dict."""
    env = env.unwrapped
    ids = _Ids()
    grid = env.grid
    cells = []
    for x in range(grid.width):
        for y in range(grid.height):
            obj = grid.get(x, y)
            if obj is not None:
                cells.append({"pos": [x, y], "obj": _obj(obj, ids)})
    carrying = _obj(env.carrying, ids)
    spec = getattr(env, "spec", None)
    return {
        "format": LAYOUT_FORMAT,
        "level": spec.id if spec is not None else type(env).__name__,
        "width": int(grid.width),
        "height": int(grid.height),
        "rooms": {
            "room_size": int(env.room_size),
            "num_rows": int(env.num_rows),
            "num_cols": int(env.num_cols),
        },
        "cells": cells,
        "agent": {"pos": [int(v) for v in env.agent_pos], "dir": int(env.agent_dir)},
        "carrying": carrying,
        "mission": env.mission,
        "max_steps": int(env.max_steps),
        "step_count": int(env.step_count),
        "instr": _instr(env.instrs, ids),
    }


def layout_json(env: Any) -> str:
    """:func:`export_layout` as a JSON string (the ``layout=`` option of the Rust env)."""
    return json.dumps(export_layout(env))


def _door_state(door: Any) -> str:
    if door.is_open:
        return "open"
    return "locked" if door.is_locked else "closed"


def state(env: Any) -> dict[str, Any]:
    """The facts parity compares, shaped like the Rust world's ``state_json``."""
    env = env.unwrapped
    grid = env.grid
    doors = []
    for x in range(grid.width):
        for y in range(grid.height):
            obj = grid.get(x, y)
            if obj is not None and obj.type == "door":
                doors.append({"pos": [x, y], "color": obj.color, "state": _door_state(obj)})
    carrying = env.carrying
    return {
        "agent_pos": [int(v) for v in env.agent_pos],
        "agent_dir": int(env.agent_dir),
        "carrying": None if carrying is None else {"type": carrying.type, "color": carrying.color},
        "doors": doors,
        "step_count": int(env.step_count),
    }
