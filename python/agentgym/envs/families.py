"""One registry entry per env family: what the agent, the actor and eval need to know of an env.

An entry holds the system instruction (AgentGym's "Thought: ... Action: ..." format), how a
reply's action is sanitised, how an episode's end is read (success, truncation), how eval groups
tasks, where its first observation states the goal (expert demos can restate it in their
thoughts), and the options a remote pool needs to read that family's servers as AgentGym's
clients do. Code that would otherwise branch on an env's name reads its entry instead; an env
without an entry gets ``GENERIC``.

The success rule is the env's own completion signal, the same for training metrics and eval:
BabyAI and TextCraft reward only a reached goal (reward > 0 at the end); ScienceWorld completes a
task at score 100 (its ``completed`` flag), fails it at a negative score, and otherwise ends an
episode at its move limit, which is truncation; a search episode succeeds when its answer scores 1
(exact match by default).

The webnav family (generated websites in WebArena's format) also has its own reply grammar:
WebArena's, where the action is the first ``` block of the reply; its horizon schedule is
AgentGym-RL's WebArena one (``configs/horizon/webarena.yaml``).

The search family has its own reply grammar (Search-R1's ``<search>``/``<answer>`` tags) instead
of the "Thought: ... Action: ..." lines, and stop strings: a reply ends at its first
``</search>`` or ``</answer>``, so the text Search-R1 cuts off is neither sampled on (by an engine
that honours ``SamplingParams.stop``) nor trained on (the actor cuts it either way). Its horizon
schedule is AgentGym-RL's SearchQA one (``configs/horizon/searchqa.yaml``). Where agentgym
deliberately differs from Search-R1, WebArena and minigrid is listed in ``docs/fidelity.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_FORMAT = (
    "Answer every turn in exactly this format:\n"
    "Thought: <one or two short sentences of reasoning>\n"
    "Action: <exactly one action>\n"
    "Write a single Action line per turn; nothing after it."
)

BABYAI_INSTRUCTION = (
    "You are an agent in a grid world made of rooms. Each turn you receive a description of what "
    "you see and the goal of the episode; reach the goal with as few actions as you can.\n"
    "Actions you can take:\n"
    "- turn left\n"
    "- turn right\n"
    "- move forward\n"
    "- go to <color> <object> <n>: walk next to the n-th visible object of that kind\n"
    "- pick up <color> <object> <n>: pick up an object you can reach (you carry one at most)\n"
    "- go through <color> open door <n>: pass through an open door\n"
    "- toggle and go through <color> <state> door <n>: open a closed or locked door and pass it; "
    "a locked door needs a key of the same color in your hands\n"
    "- toggle: open or close the door right in front of you\n"
    "When the observation lists available actions, choose one of them.\n" + _FORMAT
)

TEXTCRAFT_INSTRUCTION = (
    "You are crafting items in a text version of Minecraft. The first message lists the crafting "
    "commands you may use and the item to craft.\n"
    "Commands:\n"
    "- get <quantity> <item>: take a base ingredient from the environment\n"
    "- craft <quantity> <item> using <quantity> <ingredient>, <quantity> <ingredient>, ...: craft "
    "with one of the listed commands; a generic ingredient such as planks may be replaced by a "
    "specific kind such as oak planks\n"
    "- inventory: list what you hold\n"
    "Always give quantities, e.g. 'get 2 iron ingot' or 'craft 1 iron pickaxe using 3 iron ingot, "
    "2 stick'. Do not say where an item comes from and do not invent recipes.\n" + _FORMAT
)

SCIWORLD_INSTRUCTION = (
    "You are doing a science task in a simulated house with a kitchen, workshop, greenhouse and "
    "other rooms. The first message states your task and what you see; complete the task.\n"
    "Actions (OBJ and LOC are names as the observations write them):\n"
    "- look around, look at OBJ, look in OBJ, inventory, task (repeat the task)\n"
    "- go to LOC, open OBJ, close OBJ, pick up OBJ, put down OBJ, move OBJ to OBJ\n"
    "- activate OBJ, deactivate OBJ, use OBJ, use OBJ on OBJ, read OBJ, eat OBJ, flush OBJ\n"
    "- pour OBJ into OBJ, dunk OBJ into OBJ, mix OBJ\n"
    "- connect OBJ to OBJ, disconnect OBJ (electrical parts)\n"
    "- focus on OBJ: declare the object your task is about; focusing on a wrong one fails the "
    "task\n"
    "- wait (10 time steps), wait1 (1 time step)\n" + _FORMAT
)

SEARCH_INSTRUCTION = (
    "Answer the question the user gives you. Think step by step inside <think> and </think> "
    "whenever you get new information. When you lack a fact, search for it by writing "
    "<search> query </search>; the best matching passages come back between <information> and "
    "</information>. Search as often as you need, one query per turn. When you know the answer, "
    "give it inside <answer> and </answer> with no explanation, for example <answer> Beijing "
    "</answer>."
)

SEARCH_INVALID_REPLY = (
    "My previous action is invalid. If I want to search, I should put the query between <search> "
    "and </search>. If I want to give the final answer, I should put the answer between <answer> "
    "and </answer>. Let me try again."
)
"""AgentGym-RL's and Search-R1's observation for a reply with neither tag (the native env's
``grammar::INVALID_ACTION``; a test keeps them equal)."""

WEBNAV_INSTRUCTION = (
    "You are an autonomous agent that operates a web browser to complete a task. Each turn you "
    "receive an observation with:\n"
    "- the accessibility tree of the current page, one element a line as [id] role 'name', "
    "where id is the number you act on (only the part of the page in view is shown);\n"
    "- the page's URL, the objective to complete, and your previous action.\n"
    "Actions:\n"
    "- click [id]: click the element with that id\n"
    "- type [id] [text] [press_enter_after=0|1]: replace the content of a text field with text "
    "(in a combobox, text is one of its options); Enter is pressed afterwards unless "
    "press_enter_after is 0\n"
    "- hover [id]: move the pointer over an element\n"
    "- press [key_comb]: press a key or key combination, e.g. Enter or Control+a\n"
    "- scroll [down] or scroll [up]: move the view down or up the page\n"
    "- new_tab: open an empty tab; tab_focus [tab_index]: switch to a tab; close_tab: close "
    "the current tab\n"
    "- goto [url]: open a URL; go_back: the previous page; go_forward: the next page after "
    "going back\n"
    "- stop [answer]: end the task; put the answer in the brackets when the objective asks a "
    "question (exactly as the page shows it, e.g. a number or a name), otherwise stop [N/A]\n"
    "The websites are http://shop.test/ (an online store), http://forum.test/ (a discussion "
    "forum) and http://code.test/ (a code-hosting site with projects, issues and merge "
    "requests). Use only ids from the current observation and give one action per turn. Reason "
    "briefly, then end your reply with: In summary, the next action I will perform is "
    "```click [12]``` (with your action inside the triple backticks)."
)

WEBNAV_INVALID_REPLY = (
    "Your reply has no action, so nothing happened. End your reply with 'In summary, the next "
    "action I will perform is ```<action>```', for example ```click [12]``` or ```stop [N/A]```."
)

_FENCED = re.compile(r"```(.*?)```", re.DOTALL)
_LANGUAGE_TAG = re.compile(r"[A-Za-z]+")

_SEARCH_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_SPACES = re.compile(r"\s+")

GENERIC_INSTRUCTION = (
    "You are an agent acting in a text environment. Each turn you receive an observation; act to "
    "complete the task it describes.\n" + _FORMAT
)


@dataclass(frozen=True)
class Outcome:
    """How an episode ended, by its family's rules."""

    success: bool
    truncated: bool


SEARCH_STOP = ("</search>", "</answer>")
"""Where a search reply ends (``EnvFamily.stop``)."""


def cut_search_reply(reply: str) -> str:
    """What Search-R1 keeps of a reply: up to and including its first ``</search>``, else its
    first ``</answer>``, else all of it (the native env's ``grammar::cut_reply``)."""
    for close in SEARCH_STOP:
        at = reply.find(close)
        if at >= 0:
            return reply[: at + len(close)]
    return reply


def parse_search_reply(reply: str) -> tuple[str | None, str | None]:
    """The search env's action in ``reply``, by Search-R1's rule: the first complete
    ``<search>...</search>`` or ``<answer>...</answer>`` of what :func:`cut_search_reply` keeps,
    with the content's whitespace collapsed, or the corrective observation when it has neither.
    Only the tag is sent, so a long chain of thought never meets the action length cap."""
    match = _SEARCH_TAG.search(cut_search_reply(reply))
    if match is None:
        return None, SEARCH_INVALID_REPLY
    tag, content = match.group(1), _SPACES.sub(" ", match.group(2)).strip()
    return f"<{tag}>{content}</{tag}>", None


def parse_webnav_reply(reply: str) -> tuple[str | None, str | None]:
    """WebArena's rule (``re.search``): the action is the reply's first ``` block, wherever it
    stands. Beyond WebArena, a language tag on the block's own first line (```text) is dropped
    and line breaks become spaces. A reply without a non-empty block gets the corrective
    observation (WebArena would send a no-op action and describe the bad format in PREVIOUS
    ACTION)."""
    block = _FENCED.search(reply)
    if block is None:
        return None, WEBNAV_INVALID_REPLY
    lines = [line.strip() for line in block.group(1).strip().splitlines()]
    if len(lines) > 1 and _LANGUAGE_TAG.fullmatch(lines[0]):
        lines = lines[1:]
    action = " ".join(line for line in lines if line)
    return (action, None) if action else (None, WEBNAV_INVALID_REPLY)


def parse_webarena_reply(reply: str) -> tuple[str | None, str | None]:
    """For AgentGym's WebArena server, which reads the action from the first ``` block of what
    it is sent: the action webnav's rule finds, sent inside one fenced block."""
    action, error = parse_webnav_reply(reply)
    return (f"```{action}```", None) if action is not None else (None, error)


def _think_then_tag(thought: str, action: str) -> str:
    return f"<think>{thought}</think>\n{action}"


def _answer_correct(reward: float, done: bool, truncated: bool) -> Outcome:
    # The reward is the answer's score; success is a full score (EM or subEM of 1, F1 of 1).
    return Outcome(success=done and reward >= 1.0, truncated=truncated and not done)


def _goal_reached(reward: float, done: bool, truncated: bool) -> Outcome:
    return Outcome(success=done and reward > 0, truncated=truncated and not done)


def _sciworld_outcome(score: float, done: bool, truncated: bool) -> Outcome:
    # ScienceWorld ends an episode at completion (score 100), failure (score < 0) or its move
    # limit. AgentGym's server reports all three as done, so a done episode that neither
    # completed nor failed ran out of moves.
    completed = done and score >= 100
    out_of_moves = done and 0 <= score < 100
    return Outcome(success=completed, truncated=(truncated and not done) or out_of_moves)


def _line_after(prefix: str) -> Callable[[str], str | None]:
    """An observation -> the rest of its first line that starts with ``prefix`` (without a
    final full stop), or None."""

    def goal(observation: str) -> str | None:
        for line in observation.splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip().rstrip(".").strip() or None
        return None

    return goal


# Scripted baselines (``EnvFamily.baselines``, ``agentgym.agent.baselines``): the simplest rule
# per family, for the eval tables. Each maps (observations so far, actions taken) -> an action.
_AVAILABLE = re.compile(r"^Available actions: (\[.*\])\s*$", re.M)
_GOAL_OBJECT = re.compile(r"\b(go to|pick up|open|put)\b(?: the| a)? (\w+ (?:ball|box|key|door))")


def _listed_actions(observation: str) -> list[str]:
    """The actions a BabyAI observation lists (its "Available actions:" line)."""
    import json

    m = _AVAILABLE.search(observation)
    try:
        return [str(a) for a in json.loads(m.group(1))] if m else []
    except ValueError:
        return []


def _babyai_goal_object(observations: Sequence[str], actions: Sequence[str]) -> str:
    """BabyAI ``goal-object``: the goal's first object, acted on when an action on it is listed
    (``pickup`` for pick up, ``toggle`` for open, else ``go to``; the first instance), else
    ``turn left``. On GoTo levels this is the rule "go to the red ball if listed, else turn"."""
    goal = (_line_after("Your goal: ")(observations[0]) or "").lower()
    listed = _listed_actions(observations[-1])
    m = _GOAL_OBJECT.search(goal)
    if m:
        verb, obj = m.group(1), m.group(2)
        prefixes = {"pick up": ("pickup ",), "open": ("toggle",)}.get(verb, ()) + ("go to ",)
        color, kind = obj.split(" ", 1)
        for prefix in prefixes:
            for action in listed:
                words = action.split()
                if (
                    action.startswith(prefix)
                    and kind in words
                    and (color in words or color in ("a", "the"))
                ):
                    return action
    return "turn left"


def _textcraft_group(task_id: int, info: Mapping[str, Any]) -> str:
    """TextCraft's eval row: the goal's depth; the depth-1 ``*_planks`` goals apart (their
    recipe has the worked example's shape, ``craft 4 X planks using 1 X logs``, so copying the
    example's reasoning solves them)."""
    depth = info["depth"]
    if depth == 1 and str(info.get("goal", "")).endswith("planks"):
        return "depth 1: planks"
    return f"depth {depth}"


_CRAFT_LINE = re.compile(r"^craft (\d+) (.+?) using (.+)$")


def _textcraft_first_recipe(observations: Sequence[str], actions: Sequence[str]) -> str | None:
    """TextCraft ``first-recipe``: get each ingredient of the goal's first listed recipe (once),
    then craft the goal with it; stops after the craft. No tags, no nested recipes."""
    goal = _line_after("Goal: craft ")(observations[0])
    recipe = None
    for line in observations[0].splitlines():
        m = _CRAFT_LINE.match(line.strip())
        if m and goal is not None and m.group(2) == goal:
            recipe = m
            break
    if recipe is None:
        return None
    gets = [f"get {part.strip()}" for part in recipe.group(3).split(",")]
    craft = recipe.group(0).strip()
    plan = [*gets, craft]
    return plan[len(actions)] if len(actions) < len(plan) else None


_SEARCH_SUBJECT = re.compile(r"(?:founder of|author of|was) (.+?) born\?")
_SEARCH_PLACE = re.compile(r"\b(?:born in|a city in) ([A-Z]\w+)")


def _search_one_hop(observations: Sequence[str], actions: Sequence[str]) -> str | None:
    """Deep Search ``one-hop``: search the entity the question names, then answer the place
    the first passage names (where someone was born, or the country a city is in); a question
    that needs more hops gets a wrong answer or none. Its score is what one search buys."""
    if not actions:
        m = _SEARCH_SUBJECT.search(observations[0])
        return f"<search> {m.group(1)} </search>" if m else None
    if len(actions) == 1:
        m = _SEARCH_PLACE.search(observations[-1])
        return f"<answer> {m.group(1)} </answer>" if m else None
    return None


# Worked examples: the first observations of BabyAI task 804 (level 4, GoToLocalS8N7, seed 20:
# a purple box among a purple ball and other distractors, so copying the reply solves none of the
# red-ball levels) and TextCraft task 3, as the envs write them; both training tasks, never held
# out.
_BABYAI_EXAMPLE_OBSERVATION = (
    "Your goal: go to the purple box\n"
    "In front of you in this room, you can see several objects: There is a green ball 1 1 "
    "steps in front of you and 1 steps to your right.  There is a purple ball 1 2 steps in "
    "front of you and 1 steps to your right.  There is a blue key 1 2 steps in front of you "
    "and 2 steps to your right.  There is a purple box 1 2 steps in front of you and 3 steps "
    "to your right.  The room has walls around you. You are facing a wall 3 steps away. You "
    "are not carrying anything.\n"
    'Available actions: ["turn left", "turn right", "move forward", "pickup green ball 1", '
    '"pickup purple ball 1", "pickup blue key 1", "pickup purple box 1", "go to green ball '
    '1", "go to purple ball 1", "go to blue key 1", "go to purple box 1", "check available '
    'actions"]'
)
_TEXTCRAFT_EXAMPLE_OBSERVATION = (
    "Crafting commands:\ncraft 4 birch planks using 1 birch logs\n\nGoal: craft birch planks."
)
# Deep Search: the first question of the generated world that the configs build
# (`agentgym index generate DIR --questions 720`, seed 0), a training task; the reply searches
# the question's first hop, so copying it answers no other question.
_SEARCH_EXAMPLE_OBSERVATION = "Question: In which city was the founder of Brindsoun Mills born?"


def _agentgym_reply(thought: str, action: str) -> str:
    return f"Thought: {thought}\nAction: {action}"


def _webarena_reply(thought: str, action: str) -> str:
    return (
        f"Let's think step-by-step. {thought} In summary, the next action I will perform is "
        f"```{action}```"
    )


@dataclass(frozen=True)
class TaskFilter:
    """A selection of an env's task ids by ``task_id % modulus``: BabyAI's levels (the id's
    level in AgentGym's order), webnav's templates."""

    family: str
    """The env whose ids it selects."""
    modulus: int
    what: str
    """What its values are, for messages ("BabyAI levels")."""


TASK_FILTERS: dict[str, TaskFilter] = {
    "levels": TaskFilter("babyai", 40, "BabyAI levels"),
    "templates": TaskFilter("webnav", 46, "webnav templates"),
}
"""The ``tasks.*`` filters by field name (``TaskRange.levels``, ``.templates``); each belongs to
one family, which also lists it in its ``task_filters``."""


@dataclass(frozen=True)
class EnvFamily:
    """What agentgym knows of one env family (see the module docstring)."""

    name: str
    instruction: str
    """The system message of every episode."""
    strict_actions: bool = False
    """Sanitiser: True keeps only letters, digits, commas and spaces, lower-cased (the envs whose
    actions are plain words); False only strips quotes and backticks (actions with symbols)."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Sanitised actions replaced by another (AgentGym's TextCraft client turns look into
    inventory)."""
    outcome: Callable[[float, bool, bool], Outcome] = _goal_reached
    """(episode reward, done, truncated) at the end -> success and truncation."""
    eval_group: Callable[[int, Mapping[str, Any]], str] | None = None
    """(task id, the reset session's info) -> the eval row a task counts in; None: one row."""
    group_needs_info: bool = True
    """Whether ``eval_group`` reads the session's info (else eval does not reset to ask)."""
    task_filters: tuple[str, ...] = ()
    """The ``tasks.*`` filters (``TASK_FILTERS``) whose ids mean something in this env; a config
    that sets another one on it is refused."""
    curriculum: str | None = None
    """The filter a curriculum (``tasks.curriculum``) stages, e.g. BabyAI's levels; None: this
    env takes no curriculum."""
    remote_options: Mapping[str, Any] = field(default_factory=dict)
    """Defaults for ``EnvPool.remote`` so its replies read as AgentGym's client reads them."""
    reward_scale: str = "0..1"
    """The range of an episode's reward and how it is made (documentation; README states it)."""
    parse_reply: Callable[[str], tuple[str | None, str | None]] | None = None
    """The family's own reply grammar: reply -> (action, None) or (None, corrective observation).
    None: AgentGym's "Action:" line rules (``agentgym.agent.parsing``)."""
    stop: tuple[str, ...] = ()
    """Stop strings: a reply ends with the first of these it holds. The actor asks the engine
    to stop sampling there (``SamplingParams.stop``) and cuts the reply's tokens after it
    before the env sees the reply and before it enters the trajectory (Search-R1's
    ``</search>``/``</answer>``). Empty: a reply ends where the engine stops."""
    format_reply: Callable[[str, str], str] = _agentgym_reply
    """(thought, action) -> the agent's reply in this family's format (expert demos, tokenizer
    corpora); it must parse back to the action with this family's rules: "Thought: ...\nAction:
    ..." by default, WebArena's form for webnav, ``<think>...</think>`` then the tag for search."""

    example: tuple[str, str] | None = None
    """A worked exchange (an observation of a training task, the reply to it in this family's
    format) that ``actor.worked_example`` puts before the episode's first observation, so a
    model that does not follow the format from the instruction alone sees it done once. None:
    the family has none."""

    goal: Callable[[str], str | None] | None = None
    """The episode's first observation -> its goal as the env words it (BabyAI's "Your goal:"
    line, TextCraft's "Goal:" line), or None; ``agentgym demos --goal-in-thought`` restates it
    at the start of every thought. None: the family states no goal line."""

    baselines: Mapping[str, Callable[[Sequence[str], Sequence[str]], str | None]] = field(
        default_factory=dict
    )
    """Scripted baselines by name, the first the default (``agentgym eval --policy
    scripted[:NAME]``, ``agentgym.agent.baselines``): (observations so far, the first stating
    the goal; actions taken) -> the next action, or None to stop."""

    def group(self, env: str, task_id: int, info: Mapping[str, Any]) -> str:
        """The eval row of ``task_id`` (the env's name when the family has no grouping)."""
        return self.eval_group(task_id, info) if self.eval_group else env

    def id_group(self, task_id: int) -> str | None:
        """The eval row of ``task_id`` where it follows from the id alone (BabyAI's level),
        else None."""
        if self.eval_group is None or self.group_needs_info:
            return None
        return self.eval_group(task_id, {})


FAMILIES: dict[str, EnvFamily] = {
    f.name: f
    for f in (
        EnvFamily(
            "babyai",
            BABYAI_INSTRUCTION,
            strict_actions=True,
            task_filters=("levels",),
            curriculum="levels",
            eval_group=lambda task_id, info: f"level {task_id % TASK_FILTERS['levels'].modulus}",
            group_needs_info=False,
            reward_scale="0..1 (1 - 0.9 * steps / max_steps at the goal, else 0)",
            goal=_line_after("Your goal: "),
            baselines={"goal-object": _babyai_goal_object},
            example=(
                _BABYAI_EXAMPLE_OBSERVATION,
                _agentgym_reply(
                    "My goal is the purple box. The purple box 1 is listed among the available "
                    "actions, so I go to it.",
                    "go to purple box 1",
                ),
            ),
        ),
        EnvFamily(
            "textcraft",
            TEXTCRAFT_INSTRUCTION,
            strict_actions=True,
            aliases={"look": "inventory"},
            eval_group=_textcraft_group,
            reward_scale="0..1 (1 when the goal item is crafted)",
            goal=_line_after("Goal: "),
            baselines={"first-recipe": _textcraft_first_recipe},
            example=(
                _TEXTCRAFT_EXAMPLE_OBSERVATION,
                _agentgym_reply(
                    "To craft birch planks I need 1 birch logs, which I do not have yet; I get it.",
                    "get 1 birch logs",
                ),
            ),
        ),
        EnvFamily(
            "search",
            SEARCH_INSTRUCTION,
            outcome=_answer_correct,
            eval_group=lambda task_id, info: str(info.get("data_source") or "search"),
            reward_scale="0..1 (exact match of the normalised answer; subem or token F1 by option)",
            parse_reply=parse_search_reply,
            format_reply=_think_then_tag,
            stop=SEARCH_STOP,
            baselines={"one-hop": _search_one_hop},
            example=(
                _SEARCH_EXAMPLE_OBSERVATION,
                _think_then_tag(
                    "I need to know who founded Brindsoun Mills first, so I search for it.",
                    "<search> Brindsoun Mills </search>",
                ),
            ),
        ),
        EnvFamily(
            "webnav",
            WEBNAV_INSTRUCTION,
            task_filters=("templates",),
            eval_group=lambda task_id, info: f"{info['site']}/{info['kind']}",
            reward_scale="0..1 (1 when the task's check accepts the state or answer at stop)",
            parse_reply=parse_webnav_reply,
            format_reply=_webarena_reply,
        ),
        EnvFamily(
            "webarena",
            WEBNAV_INSTRUCTION,
            group_needs_info=False,
            remote_options={"dialect": "webarena"},
            reward_scale="0..1 (WebArena's evaluator on the final state or answer)",
            parse_reply=parse_webarena_reply,
            format_reply=_webarena_reply,
        ),
        EnvFamily(
            "sciworld",
            SCIWORLD_INSTRUCTION,
            outcome=_sciworld_outcome,
            eval_group=lambda task_id, info: str(info["task_name"]),
            remote_options={"task_field": "task_description", "score_field": "score"},
            reward_scale="-100..100 (the last score; -100 when the task failed)",
        ),
    )
}

GENERIC = EnvFamily("generic", GENERIC_INSTRUCTION)


def family(env: str) -> EnvFamily:
    """The entry of ``env`` (case-insensitive); ``GENERIC`` for an env without one."""
    return FAMILIES.get(env.lower(), GENERIC)


def opens_with_example(env: str, worked_example: bool) -> bool:
    """Whether an episode of ``env`` opens with its family's worked example when the run asks
    for them (``actor.worked_example``): only families that have one do, so a multi-env run can
    show the format where an example exists and open the other envs' episodes plainly."""
    return worked_example and family(env).example is not None
