"""Reference BabyAI-text env: AgentGym's text interface, written from its observed behaviour,
running on the `minigrid` package.

It is the oracle for the Rust env's text-parity tests and the baseline of the BabyAI benchmark.
The behaviour (observation wording, action names and numbering, how high-level actions become
primitive moves, where agentgym deliberately differs from AgentGym) is specified in
`BABYAI_TEXT.md` next to this file; keep the two in step with
`rust/envserver/src/envs/babyai/text.rs` and `planner.rs`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# AgentGym's 40 levels, in its order: task id `t` plays `LEVELS[t % 40]` with seed `t // 40`.
LEVELS: tuple[str, ...] = (
    "BabyAI-GoToRedBallGrey-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    # AgentGym's "GoToObjS6-v0": minigrid 2.3.1 (pinned by AgentGym) registers it with
    # room_size=4, which is minigrid 3.x's GoToObjS4-v0
    "BabyAI-GoToObjS4-v0",
    "BabyAI-GoToLocalS8N7-v0",
    "BabyAI-GoToObjMazeS7-v0",
    "BabyAI-GoToImpUnlock-v0",
    "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-GoToRedBlueBall-v0",
    "BabyAI-GoToDoor-v0",
    "BabyAI-GoToObjDoor-v0",
    "BabyAI-Open-v0",
    "BabyAI-OpenRedDoor-v0",
    "BabyAI-OpenDoorLoc-v0",
    "BabyAI-OpenRedBlueDoorsDebug-v0",
    "BabyAI-OpenDoorsOrderN4Debug-v0",
    "BabyAI-Pickup-v0",
    "BabyAI-UnblockPickup-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PickupDistDebug-v0",
    "BabyAI-PickupAbove-v0",
    "BabyAI-PutNextLocalS6N4-v0",
    "BabyAI-PutNextS7N4Carrying-v0",
    "BabyAI-Unlock-v0",
    "BabyAI-UnlockLocalDist-v0",
    "BabyAI-KeyInBox-v0",
    "BabyAI-UnlockPickupDist-v0",
    "BabyAI-BlockedUnlockPickup-v0",
    "BabyAI-UnlockToUnlock-v0",
    "BabyAI-ActionObjDoor-v0",
    "BabyAI-FindObjS7-v0",
    "BabyAI-KeyCorridorS6R3-v0",
    "BabyAI-OneRoomS20-v0",
    "BabyAI-MoveTwoAcrossS8N9-v0",
    "BabyAI-SynthS5R2-v0",
    "BabyAI-SynthLoc-v0",
    "BabyAI-SynthSeq-v0",
    "BabyAI-MiniBossLevel-v0",
    "BabyAI-BossLevel-v0",
    "BabyAI-BossLevelNoUnlock-v0",
)

# minigrid's encoding tables (index = code in the observation image).
OBJECT_NAMES = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava")
COLOR_NAMES = ("red", "green", "blue", "purple", "yellow", "grey")
DOOR_STATES = ("open", "closed", "locked")
# Kinds that are named in the view; everything else (unseen, empty, floor) is not.
NAMED_KINDS = frozenset({"door", "key", "ball", "box", "goal", "lava", "wall"})
# Kinds the planner routes around and `drop` refuses to drop onto. Doors and goals are free.
BLOCKING_KINDS = frozenset({"wall", "box", "lava", "ball", "key"})

DIR_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(7)
PRIMITIVES = ("left", "right", "forward", "pickup", "drop", "toggle", "done")

CHECK = "check available actions"
NOT_RECOGNIZED = "The action is not recognized. Please check valid actions."
NO_CHANGE = "No change in state."
COMPLETED = "\n The task is completed."


@dataclass(frozen=True)
class Thing:
    """A named cell in the agent's view: `name` is "red ball", "blue closed door", "grey wall"."""

    name: str
    kind: str
    color: str
    pos: tuple[int, int]
    dist: int  # Manhattan distance from the agent


@dataclass
class View:
    """What the agent sees: named things (near to far) and the walls/boxes straight ahead."""

    things: list[Thing]
    ahead: list[tuple[str, int]]  # (kind, steps ahead), nearest first
    xs: range  # the planner's search window, as AgentGym computes it
    ys: range


@dataclass
class Menu:
    """The high-level actions available now (name -> primitive moves, insertion-ordered) and
    the explanatory messages for actions that were considered but are not possible."""

    actions: dict[str, list[int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def add(a: tuple[int, int], b: tuple[int, int], k: int = 1) -> tuple[int, int]:
    """`a + k * b` on grid coordinates."""
    return (a[0] + k * b[0], a[1] + k * b[1])


def search_window(pos: tuple[int, int], direction: int, size: int) -> tuple[range, range]:
    """AgentGym's coordinate window for path search: the view square shifted by one cell
    on some sides (it includes one row behind the agent for some headings)."""
    f, r = DIR_VEC[direction], DIR_VEC[(direction + 1) % 4]
    top_left = add(add(pos, f, size - 1), r, -(size // 2))
    corner = add(top_left, (r[0] - f[0], r[1] - f[1]), size)
    axes = []
    for k in range(2):
        if corner[k] < top_left[k]:
            axes.append(range(corner[k], top_left[k] + 1))
        else:
            axes.append(range(top_left[k], corner[k]))
    return axes[0], axes[1]


def read_view(image: np.ndarray, pos: tuple[int, int], direction: int) -> View:
    """Names the visible cells of minigrid's egocentric `image` (size x size x 3)."""
    size = image.shape[0]
    f, r = DIR_VEC[direction], DIR_VEC[(direction + 1) % 4]
    top_left = add(add(pos, f, size - 1), r, -(size // 2))
    things: list[Thing] = []
    ahead: list[tuple[str, int]] = []
    for j in range(size):
        for i in range(size):
            cell = add(add(top_left, f, -j), r, i)
            if cell[0] < 0 or cell[1] < 0 or cell == pos:
                continue
            kind_code, color_code, state_code = (int(v) for v in image[i, j])
            kind = OBJECT_NAMES[kind_code]
            color = COLOR_NAMES[color_code]
            rel = (cell[0] - pos[0], cell[1] - pos[1])
            if kind in NAMED_KINDS:
                state = DOOR_STATES[state_code]
                name = f"{color} {state} door" if kind == "door" else f"{color} {kind}"
                things.append(Thing(name, kind, color, cell, abs(rel[0]) + abs(rel[1])))
            if kind in ("box", "wall") and f[0] * rel[1] - f[1] * rel[0] == 0:
                ahead.append((kind, f[0] * rel[0] + f[1] * rel[1]))
    things.sort(key=lambda t: t.dist)
    ahead.sort(key=lambda a: a[1])
    xs, ys = search_window(pos, direction, size)
    return View(things, ahead, xs, ys)


def find_path(
    start: tuple[int, int],
    direction: int,
    target: tuple[int, int],
    view: View,
    arrive: bool,
) -> list[int] | None:
    """Breadth-first search over (cell, heading) with forward/left/right moves, inside the
    search window, around blocking things. `arrive`: end on `target`; otherwise end facing it.

    The queue admits duplicates and a state is marked visited when dequeued; a state's parent
    is the last one that enqueued it. This reproduces AgentGym's choice among equally short
    paths exactly.
    """
    blocked = {t.pos for t in view.things if t.kind in BLOCKING_KINDS}
    parent: dict[tuple[tuple[int, int], int], tuple[tuple[tuple[int, int], int], int]] = {}
    visited: set[tuple[tuple[int, int], int]] = set()
    queue = deque([(start, direction)])
    while queue:
        state = queue.popleft()
        visited.add(state)
        pos, d = state
        done = pos == target if arrive else add(pos, DIR_VEC[d]) == target
        if done:
            path = []
            while state != (start, direction):
                state, move = parent[state]
                path.append(move)
            return path[::-1]
        for move in (FORWARD, LEFT, RIGHT):
            if move == FORWARD:
                nxt = (add(pos, DIR_VEC[d]), d)
            else:
                nxt = (pos, (d + (-1 if move == LEFT else 1)) % 4)
            cell = nxt[0]
            if cell[0] not in view.xs or cell[1] not in view.ys:
                continue
            if nxt in visited or cell in blocked:
                continue
            queue.append(nxt)
            parent[nxt] = (state, move)
    return None


def offset_words(thing: Thing, pos: tuple[int, int], direction: int) -> str:
    """Where a thing is: "right in front of you 2 steps away. " or
    "1 steps in front of you and 3 steps to your left. "."""
    f, r = DIR_VEC[direction], DIR_VEC[(direction + 1) % 4]
    rel = (thing.pos[0] - pos[0], thing.pos[1] - pos[1])
    front = f[0] * rel[0] + f[1] * rel[1]
    right = r[0] * rel[0] + r[1] * rel[1]
    if right == 0:
        return f"right in front of you {front} steps away. "
    side = "right" if right > 0 else "left"
    return f"{front} steps in front of you and {abs(right)} steps to your {side}. "


def describe(view: View, pos: tuple[int, int], direction: int, carrying: Any) -> str:
    """The observation text: things in view, the wall/box ahead, what is carried."""
    if view.things:
        parts = ["In front of you in this room, you can see several objects: "]
        seen: dict[str, int] = {}
        for thing in view.things:
            if thing.kind == "wall":
                continue
            seen[thing.name] = seen.get(thing.name, 0) + 1
            where = offset_words(thing, pos, direction)
            parts.append(f"There is a {thing.name} {seen[thing.name]} {where} ")
        text = "".join(parts)
    else:
        text = "You cannot see any objects within sight."
    text += "The room has walls around you. "
    if view.ahead:
        kind, steps = view.ahead[0]
        text += f"You are facing a {kind} {steps} steps away. "
    if carrying is None:
        return text + "You are not carrying anything."
    return text + f"You are carrying a {carrying.color} {carrying.type}."


class _Planner:
    """Path search from the agent's current state, memoized per (target, arrive)."""

    def __init__(self, view: View, pos: tuple[int, int], direction: int):
        self.view, self.pos, self.direction = view, pos, direction
        self.memo: dict[tuple[tuple[int, int], bool], list[int] | None] = {}

    def path(self, target: tuple[int, int], arrive: bool) -> list[int] | None:
        key = (target, arrive)
        if key not in self.memo:
            self.memo[key] = find_path(self.pos, self.direction, target, self.view, arrive)
        path = self.memo[key]
        return None if path is None else list(path)


def _numbered(
    menu: Menu, counts: dict[str, int], verb: str, thing: Thing, path: list[int] | None, what: str
) -> None:
    """Adds "<verb> <name> <n>" where n counts the reachable things of that name so far; an
    unreachable thing leaves an error under the next number instead."""
    n = counts.get(thing.name, 0) + 1
    key = f"{verb} {thing.name} {n}"
    if path is None:
        menu.errors[key] = f"You cannot {what} {thing.name} {n}, as there is no path leading to it."
        return
    counts[thing.name] = n
    menu.actions[key] = path


def _pickups(menu: Menu, view: View, plan: _Planner) -> None:
    counts: dict[str, int] = {}
    for thing in view.things:
        if thing.kind in ("wall", "door", "goal"):
            continue
        path = plan.path(thing.pos, arrive=False)
        _numbered(
            menu, counts, "pickup", thing, None if path is None else path + [PICKUP], "pickup"
        )


def _drop(menu: Menu, view: View, front: tuple[int, int], carrying: Any) -> None:
    if carrying is None:
        menu.errors["drop"] = "You cannot drop the object, as you are not carrying anything."
    elif any(t.pos == front and t.kind in BLOCKING_KINDS for t in view.things):
        menu.errors["drop"] = (
            "You cannot drop the object, as there is already an object in front of you."
        )
    else:
        menu.actions["drop"] = [DROP]


def _python_dict_repr(counts: dict[str, int]) -> str:
    return "{" + ", ".join(f"'{k}': {v}" for k, v in counts.items()) + "}"


def _doors(menu: Menu, view: View, plan: _Planner, carrying: Any) -> None:
    counts: dict[str, int] = {}
    for thing in view.things:
        if thing.kind != "door":
            continue
        counts[thing.name] = n = counts.get(thing.name, 0) + 1
        label = f"{thing.name} {n}"
        state = thing.name.split(" ")[1]
        if state == "open":
            path = plan.path(thing.pos, arrive=True)
            if path is None:
                menu.errors[f"go through {label}"] = (
                    f"You cannot go through {label}, as there is no path leading to it."
                )
            else:
                menu.actions[f"go through {label}"] = path
            continue
        through = f"toggle and go through {label}"
        if state == "locked":
            if carrying is None or carrying.type != "key":
                menu.errors[through] = f"You cannot {through}, as you are not carrying a key."
                continue
            if carrying.color != thing.color:
                menu.errors[through] = (
                    f"You cannot {through}, as the color of the key you are carrying does not "
                    "match the color of door."
                )
                continue
        path = plan.path(thing.pos, arrive=False)
        if path is None:
            # AgentGym prints its whole door-count table here; kept for fidelity.
            menu.errors[through] = (
                f"You cannot toggle and go through {thing.name} {_python_dict_repr(counts)}, "
                "as there is no path leading to it."
            )
        else:
            menu.actions[through] = path + [TOGGLE, FORWARD]
        if path == []:
            menu.actions["toggle"] = [TOGGLE]
        if state == "closed":
            menu.errors[f"go through {label}"] = (
                f"You cannot go through {label}, as it is closed. You should toggle it first."
            )


def _goals(menu: Menu, view: View, plan: _Planner) -> None:
    for thing in view.things:
        if thing.kind != "goal":
            continue
        path = plan.path(thing.pos, arrive=True)
        if path is None:
            menu.errors["go to goal"] = (
                "You cannot go to the goal, as there is no path leading to it."
            )
        else:
            menu.actions["go to goal"] = path


def _gotos(menu: Menu, view: View, plan: _Planner) -> None:
    counts: dict[str, int] = {}
    for thing in view.things:
        if thing.kind in ("wall", "goal"):
            continue
        _numbered(menu, counts, "go to", thing, plan.path(thing.pos, arrive=False), "go to")


def build_menu(view: View, pos: tuple[int, int], direction: int, carrying: Any) -> Menu:
    """The high-level actions, in AgentGym's order: turns, move forward, pickups, drop, door
    actions, go to goal, go to objects, check available actions."""
    menu = Menu()
    menu.actions["turn left"] = [LEFT]
    menu.actions["turn right"] = [RIGHT]
    if not view.ahead or view.ahead[0][1] > 1:
        menu.actions["move forward"] = [FORWARD]
    else:
        menu.errors["move forward"] = "There is a barrier in front of you, you can't move forward."
    plan = _Planner(view, pos, direction)
    if carrying is None:
        _pickups(menu, view, plan)
    _drop(menu, view, add(pos, DIR_VEC[direction]), carrying)
    _doors(menu, view, plan, carrying)
    _goals(menu, view, plan)
    _gotos(menu, view, plan)
    menu.actions[CHECK] = []
    return menu


def goal_text(mission: str) -> str:
    """AgentGym's goal line rewrites sequencing words: "then" and "after you" become "and"."""
    return mission.replace("then", "and").replace("after you", "and")


def actions_suffix(names: list[str]) -> str:
    """'\\nAvailable actions: ["turn left", ...]'."""
    return "\nAvailable actions: [" + ", ".join(f'"{n}"' for n in names) + "]"


class BabyAIText:
    """One AgentGym-style BabyAI-text session over a minigrid env.

    `step` returns `(observation, reward, done)`; the observation carries the
    "Available actions" suffix, as AgentGym's server sends it. With `primitive=True` actions are
    minigrid's primitive names (left, right, forward, pickup, drop, toggle, done).
    """

    def __init__(self, env: Any, primitive: bool = False):
        self.env = env  # a gymnasium env whose `.unwrapped` is a minigrid BabyAI level
        self.primitive = primitive
        self.menu = Menu()
        self.image: np.ndarray | None = None
        self.observation = ""
        self.done = False

    @classmethod
    def for_level(cls, level: str, primitive: bool = False) -> BabyAIText:
        """A session on a fresh `gymnasium.make(level)` env (call `reset(seed)` next)."""
        import gymnasium as gym
        import minigrid  # noqa: F401  (registers the BabyAI ids)

        return cls(gym.make(level), primitive)

    def reset(self, seed: int) -> str:
        """Resets the minigrid env with `seed` and returns the first observation."""
        self.env.reset(seed=seed)
        return self.start()

    def start(self) -> str:
        """The first observation for the env's current state (an env that was just reset)."""
        world = self.env.unwrapped
        self.image = world.gen_obs()["image"]
        self.done = False
        text = "Your goal: " + goal_text(world.mission) + "\n" + self._refresh()
        self.observation = text + actions_suffix(self.available_actions())
        return self.observation

    def available_actions(self) -> list[str]:
        """The action names accepted now."""
        return list(PRIMITIVES) if self.primitive else list(self.menu.actions)

    def step(self, action: str) -> tuple[str, float, bool]:
        """Applies one action; invalid ones return an explanatory observation and change nothing."""
        action = action.lower().strip()
        if self.primitive:
            text, reward, self.done = self._step_primitive(action)
        else:
            text, reward, self.done = self._step_high_level(action)
        self.observation = text + actions_suffix(self.available_actions())
        return self.observation, reward, self.done

    def _refresh(self) -> str:
        """Re-reads the view, rebuilds the action menu, returns the description."""
        world = self.env.unwrapped
        pos = (int(world.agent_pos[0]), int(world.agent_pos[1]))
        view = read_view(self.image, pos, world.agent_dir)
        self.menu = build_menu(view, pos, world.agent_dir, world.carrying)
        return describe(view, pos, world.agent_dir, world.carrying)

    def _step_primitive(self, action: str) -> tuple[str, float, bool]:
        if action not in PRIMITIVES:
            return NOT_RECOGNIZED, 0.0, False
        return self._run([PRIMITIVES.index(action)])

    def _step_high_level(self, action: str) -> tuple[str, float, bool]:
        if "check" in action:
            return "You can take the following actions: " + ", ".join(self.menu.actions), 0.0, False
        if action == "":
            return NO_CHANGE, 0.0, False
        if action not in self.menu.actions:
            return self.menu.errors.get(action, NOT_RECOGNIZED), 0.0, False
        moves = self.menu.actions[action]
        if not moves:
            return NO_CHANGE, 0.0, False
        return self._run(moves)

    def _run(self, moves: list[int]) -> tuple[str, float, bool]:
        """Plays primitive moves until one leaves the view unchanged (it failed) or the episode
        ends; returns the new description, the reward and whether the episode ended."""
        reward, terminated, truncated = 0.0, False, False
        for move in moves:
            obs, reward, terminated, truncated, _ = self.env.step(move)
            unchanged = np.array_equal(obs["image"], self.image)
            self.image = obs["image"]
            if terminated or truncated or unchanged:
                break
        text = self._refresh()
        if terminated:
            text += COMPLETED
        return text, float(reward), bool(terminated or truncated)


def make_session(task_id: int, primitive: bool = False) -> tuple[BabyAIText, str]:
    """A session on AgentGym task `task_id` (level `task_id % 40`, seed `task_id // 40`, reset
    as AgentGym's server resets it) and its first observation."""
    from agentgym.envs.reference.minigrid_layout import reset_like_agentgym

    session = BabyAIText.for_level(LEVELS[task_id % len(LEVELS)], primitive)
    reset_like_agentgym(session.env, task_id // len(LEVELS))
    return session, session.start()
