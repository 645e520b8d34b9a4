"""agentgym's envs for TRL's ``GRPOTrainer`` (``pip install 'agentgym-rs[trl]'``), two ways:

- ``environment_factory=environment_factory("babyai")``: a zero-argument class per env family
  whose public methods are the family's actions as tools (TRL renders their signatures and
  docstrings into the prompt and calls them from the model's tool calls): BabyAI's action
  menu (``turn_left``, ``move_forward``, ``go_to``, ``pick_up``, ...), TextCraft's ``get``,
  ``craft`` and ``inventory``, Deep Search's ``search`` and ``answer``, webnav's ``click``,
  ``type``, ``goto``, ``scroll``, ``stop``, ... ``reset(**row)`` starts the row's task
  (``task_id``) and returns its first observation (TRL appends it to the prompt);
  ``get_reward()`` is the episode's env reward. TRL pools one instance per concurrent rollout
  and calls the tools one after another, so each tool call is one pool call of one session.
- ``rollout_func=rollout_func("babyai")``: agentgym's own episodes (its instruction, its
  "Thought: ... Action: ..." replies read by its rules, token-in/token-out with the
  observations' tokens masked), generated with the trainer's model and every live rollout
  stepped in one batched pool call per turn. Returns ``prompt_ids``, ``completion_ids``,
  ``logprobs``, ``env_mask`` and ``env_reward``/``env_success`` (for :func:`env_reward`).

Rows name their task: a ``task_id`` column and, in the prompt's last message, a ``task`` field
(``babyai/804``), which chat templates ignore (``agentgym export-tasks --for trl``).
Bad input: an unknown env is a ValueError when the factory is made; a row without a task, a
tool call before ``reset`` or after the episode ended raise (TRL hands the model the error as
the tool's result and counts a tool failure).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from agentgym.actor.config import EpisodeRules
from agentgym.actor.episodes import EpisodeSpec, run_group
from agentgym.envs import AsyncCoalescer, EnvPool, EnvSession, env_names
from agentgym.integrations.common import Episode, open_pool, require
from agentgym.integrations.tasks import parse_task_reference

require("trl")

ENDED = "(The episode is over.)"
"""Appended to the observation of the step that ends an episode."""


class _ToolEnv:
    """The part every family's tool env shares. Every public function of a subclass is a tool
    (TRL lists them), so everything else here is private."""

    env_name: ClassVar[str] = ""
    _pool_options: ClassVar[dict[str, Any]] = {}
    _shared: ClassVar[EnvPool | None] = None

    def __init__(self) -> None:
        self._session: EnvSession | None = None
        self._episode = Episode(self.env_name)

    def reset(self, task_id: int | None = None, **row: Any) -> str:
        """Starts the row's task; returns its first observation."""
        task_id = _row_task(self.env_name, task_id, row)
        if self._session is None:
            self._session = type(self)._pool().session()
        observation = self._session.reset(task_id)
        self._episode.start(task_id)
        return observation

    def get_reward(self) -> float:
        """The episode's env reward so far (its score at the end)."""
        return self._episode.reward

    @classmethod
    def _pool(cls) -> EnvPool:
        if cls._shared is None:
            cls._shared = open_pool(cls.env_name, **cls._pool_options)
        return cls._shared

    def _act(self, action: str) -> str:
        if self._session is None or self._episode.task_id is None:
            raise RuntimeError("no episode: reset first")
        if self._episode.over:
            raise ValueError(f"the episode is over; {action!r} was not taken")
        self._episode.turns += 1
        observation, reward, done, truncated = self._session.step(action)
        self._episode.record(reward, done, truncated)
        return f"{observation}\n{ENDED}" if self._episode.over else observation

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            try:
                session.close()
            except Exception:  # the pool may be gone at interpreter exit
                pass


class BabyAIEnv(_ToolEnv):
    """A BabyAI grid world: reach the goal the first observation states."""

    env_name = "babyai"

    def turn_left(self) -> str:
        """Turn left in place.

        Returns:
            What you see afterwards.
        """
        return self._act("turn left")

    def turn_right(self) -> str:
        """Turn right in place.

        Returns:
            What you see afterwards.
        """
        return self._act("turn right")

    def move_forward(self) -> str:
        """Move one step forward.

        Returns:
            What you see afterwards.
        """
        return self._act("move forward")

    def go_to(self, target: str) -> str:
        """Walk next to a visible object.

        Args:
            target: The object as the observation names it, e.g. "red ball 1".

        Returns:
            What you see afterwards.
        """
        return self._act(f"go to {target}")

    def pick_up(self, target: str) -> str:
        """Pick up an object you can reach (you carry one at most).

        Args:
            target: The object as the observation names it, e.g. "blue key 1".

        Returns:
            What you see afterwards.
        """
        return self._act(f"pickup {target}")

    def go_through(self, door: str) -> str:
        """Pass through an open door.

        Args:
            door: The door as the observation names it, e.g. "green open door 1".

        Returns:
            What you see afterwards.
        """
        return self._act(f"go through {door}")

    def toggle_and_go_through(self, door: str) -> str:
        """Open a closed or locked door and pass through it (a locked door needs the key of
        its color in your hands).

        Args:
            door: The door as the observation names it, e.g. "red locked door 1".

        Returns:
            What you see afterwards.
        """
        return self._act(f"toggle and go through {door}")

    def toggle(self) -> str:
        """Open or close the door right in front of you.

        Returns:
            What you see afterwards.
        """
        return self._act("toggle")


class TextCraftEnv(_ToolEnv):
    """TextCraft: craft the goal item with the crafting commands the first observation lists."""

    env_name = "textcraft"

    def get(self, quantity: int, item: str) -> str:
        """Take a base ingredient from the environment.

        Args:
            quantity: How many to take.
            item: The ingredient, e.g. "iron ingot".

        Returns:
            What happened.
        """
        return self._act(f"get {quantity} {item}")

    def craft(self, quantity: int, item: str, ingredients: str) -> str:
        """Craft an item with one of the listed crafting commands.

        Args:
            quantity: How many to craft, as the command says.
            item: The item to craft, e.g. "iron pickaxe".
            ingredients: The ingredients with their quantities, e.g. "3 iron ingot, 2 stick".

        Returns:
            What happened.
        """
        return self._act(f"craft {quantity} {item} using {ingredients}")

    def inventory(self) -> str:
        """List what you hold.

        Returns:
            Your inventory.
        """
        return self._act("inventory")


class SearchEnv(_ToolEnv):
    """Deep Search: answer the question, searching the corpus for the facts you lack."""

    env_name = "search"

    def search(self, query: str) -> str:
        """Search the corpus.

        Args:
            query: What to look for, e.g. "founder of Brindsoun Mills".

        Returns:
            The best matching passages.
        """
        return self._act(f"<search>{query}</search>")

    def answer(self, answer: str) -> str:
        """Give the final answer (ends the episode).

        Args:
            answer: The answer alone, e.g. "Beijing".

        Returns:
            Whether it was right.
        """
        return self._act(f"<answer>{answer}</answer>")


class WebNavEnv(_ToolEnv):
    """A generated website (shop, forum or code host): complete the objective the first
    observation states."""

    env_name = "webnav"

    def click(self, element_id: int) -> str:
        """Click an element of the page.

        Args:
            element_id: The number in brackets before the element, e.g. 12.

        Returns:
            The page afterwards.
        """
        return self._act(f"click [{element_id}]")

    def type(self, element_id: int, text: str, press_enter: bool = True) -> str:
        """Replace the content of a text field (in a combobox: choose one of its options).

        Args:
            element_id: The number in brackets before the field.
            text: The text to type.
            press_enter: Whether Enter is pressed afterwards.

        Returns:
            The page afterwards.
        """
        return self._act(f"type [{element_id}] [{text}] [{int(press_enter)}]")

    def hover(self, element_id: int) -> str:
        """Move the pointer over an element.

        Args:
            element_id: The number in brackets before the element.

        Returns:
            The page afterwards.
        """
        return self._act(f"hover [{element_id}]")

    def press(self, keys: str) -> str:
        """Press a key or key combination.

        Args:
            keys: E.g. "Enter" or "Control+a".

        Returns:
            The page afterwards.
        """
        return self._act(f"press [{keys}]")

    def scroll(self, direction: str) -> str:
        """Scroll the page.

        Args:
            direction: "down" or "up".

        Returns:
            The page afterwards.
        """
        return self._act(f"scroll [{direction}]")

    def goto(self, url: str) -> str:
        """Open a URL.

        Args:
            url: E.g. "http://shop.test/".

        Returns:
            The page afterwards.
        """
        return self._act(f"goto [{url}]")

    def go_back(self) -> str:
        """Go back to the previous page.

        Returns:
            The page afterwards.
        """
        return self._act("go_back")

    def stop(self, answer: str) -> str:
        """End the task (ends the episode).

        Args:
            answer: The answer when the objective asks a question, exactly as the page shows
                it; otherwise "N/A".

        Returns:
            Whether the task was completed.
        """
        return self._act(f"stop [{answer}]")


FAMILY_TOOLS: dict[str, type[_ToolEnv]] = {
    c.env_name: c for c in (BabyAIEnv, TextCraftEnv, SearchEnv, WebNavEnv)
}


def environment_factory(env: str, **pool_options: Any) -> type[_ToolEnv]:
    """The zero-argument environment class TRL's ``environment_factory`` takes for ``env``;
    its instances share one pool (``pool_options`` are ``EnvPool``'s, e.g. ``qa=`` and
    ``index=`` for search). An env without a tool set here is a ValueError."""
    base = FAMILY_TOOLS.get(env)
    if base is None:
        known = ", ".join(sorted(FAMILY_TOOLS))
        raise ValueError(f"no TRL tools for env {env!r}; agentgym has tools for {known}")
    if env not in env_names() and not pool_options.get("urls"):
        raise ValueError(f"unknown env {env!r}; agentgym's native envs: {', '.join(env_names())}")
    return type(base.__name__, (base,), {"_pool_options": dict(pool_options), "_shared": None})


def _row_task(env: str, task_id: int | None, row: dict[str, Any]) -> int:
    """A row's task: its ``task_id`` column, else the ``task`` field of its prompt's last
    message (which must name ``env``)."""
    if task_id is not None:
        return int(task_id)
    prompt = row.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        reference = prompt[-1].get("task")
        if reference:
            return _task_of_reference(env, reference)
    raise ValueError(
        "the dataset row names no agentgym task: give it a task_id column "
        "(agentgym export-tasks --for trl writes such rows)"
    )


def _task_of_reference(env: str, reference: str) -> int:
    named, task_id = parse_task_reference(reference)
    if named != env:
        raise ValueError(f"row task {reference!r} is not of env {env!r}")
    return task_id


def prompt_task(env: str, prompt: Any) -> int:
    """The task a rollout prompt names: the ``task`` field of its last message (or a plain
    ``env/task_id`` string prompt)."""
    if isinstance(prompt, str):
        return _task_of_reference(env, prompt)
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        reference = prompt[-1].get("task")
        if reference:
            return _task_of_reference(env, reference)
    raise ValueError(
        f"the prompt names no agentgym task (its last message has no 'task' field): {prompt!r}"
    )


def env_reward(completions: Sequence[Any], env_reward: Sequence[float], **kwargs: Any) -> list:
    """A TRL reward function: the env reward the :func:`rollout_func` episode earned."""
    return [float(r) for r in env_reward]


def rollout_func(
    env: str,
    *,
    max_turns: int = 8,
    max_new_tokens: int = 48,
    max_context_tokens: int = 2048,
    worked_example: bool = False,
    **pool_options: Any,
) -> Callable[[list[Any], Any], dict[str, list]]:
    """A TRL ``rollout_func`` running agentgym's episodes of ``env`` (module docstring).

    Args:
        max_turns: the horizon cap (turns per episode).
        max_new_tokens: tokens per reply.
        max_context_tokens: an episode whose conversation reaches this length ends truncated.
        worked_example: open with the family's worked example (``actor.worked_example``).
        **pool_options: ``EnvPool``'s options (or ``urls=`` for servers).

    Consecutive prompts naming the same task (TRL's ``num_generations`` copies) run as one
    GRPO group; every group's episodes step together in one pool call per turn.
    """
    pool = open_pool(env, **pool_options)
    coalescer = AsyncCoalescer(pool, window_s=0.01)
    episode_ids = itertools.count()
    spec = EpisodeSpec(
        env=env, task_id=0, group_id=0, group_size=1, horizon_cap=max_turns,
        rules=EpisodeRules(max_context_tokens=max_context_tokens, worked_example=worked_example),
    )  # fmt: skip

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        tasks = [prompt_task(env, p) for p in prompts]
        groups = [(t, len(list(g))) for t, g in itertools.groupby(tasks)]
        specs = [replace(spec, task_id=t, group_id=g, group_size=n)
                 for g, (t, n) in enumerate(groups)]  # fmt: skip
        engine, codec, params = _policy(trainer, max_new_tokens)
        was_training = engine.model.training
        try:
            results = asyncio.run(_run_groups(specs, engine, codec, params, coalescer, episode_ids))
        finally:
            engine.model.train(was_training)
        return _trl_output(results, groups)

    return rollout


def _policy(trainer: Any, max_new_tokens: int):
    """An agentgym engine over the trainer's current model, its chat codec and sampling."""
    from agentgym.agent.turns import ChatCodec
    from agentgym.engines.base import SamplingParams
    from agentgym.engines.hf import HFEngine, stop_ids_for

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    model = trainer.accelerator.unwrap_model(trainer.model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    engine = HFEngine(
        model, tokenizer=tokenizer, stop_token_ids=stop_ids_for(model, tokenizer),
        pad_token_id=pad, version=int(trainer.state.global_step),
    )  # fmt: skip
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=trainer.temperature or 1.0)
    return engine, ChatCodec(tokenizer), params


async def _run_groups(specs, engine, codec, params, coalescer, episode_ids) -> list[Any]:
    """Every group's episodes; the coalescer gathers their steps into one pool call a turn."""
    runs = [run_group(s, engine, coalescer, codec, params, episode_ids) for s in specs]
    return await asyncio.gather(*runs)


def _trl_output(results: list[Any], groups: list[tuple[int, int]]) -> dict[str, list]:
    out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs",
                                             "env_mask", "env_reward", "env_success")}  # fmt: skip
    for result, (task_id, size) in zip(results, groups, strict=True):
        if len(result.trajectories) != size:
            problems = "; ".join(result.errors) or "an episode produced no reply"
            raise RuntimeError(f"task {task_id}: {size - len(result.trajectories)} of {size} "
                               f"episodes failed: {problems}")  # fmt: skip
        for t in result.trajectories:
            n = t.prompt_len
            out["prompt_ids"].append(t.tokens[:n].tolist())
            out["completion_ids"].append(t.tokens[n:].tolist())
            out["logprobs"].append(t.logprobs[n:].tolist())
            out["env_mask"].append(t.loss_mask[n:].tolist())
            out["env_reward"].append(float(t.reward))
            out["env_success"].append(bool(t.success))
    return out
