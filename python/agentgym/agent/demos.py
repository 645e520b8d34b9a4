"""Expert demos as chat records: a planner's steps (``agentgym.envs.planners``) replayed in a
fresh session, opened as the actors open an episode (``agentgym.agent.prompts``), each reply in
the env family's format; ``agentgym demos`` writes them for SFT.
"""

from __future__ import annotations

from typing import Any

from agentgym.agent.prompts import initial_messages
from agentgym.envs.families import family
from agentgym.envs.planners import Step


def demo_episode(
    pool: Any,
    env: str,
    task_id: int,
    steps: list[Step],
    goal_in_thought: bool = False,
    worked_example: bool = False,
) -> dict[str, Any]:
    """Replay ``steps`` in a fresh session; the episode as a ``messages`` record (the form
    ``agentgym.learner.datasets`` reads), opened as the actors open one (the family's
    instruction, then the first observation), each reply in the family's format.
    ``goal_in_thought`` starts every thought with "My goal: <goal>." in the words of the first
    observation's goal line (the family's ``goal``), so that a reply names the goal it serves;
    ValueError when the family or the observation has no goal line. ``worked_example`` opens
    with the family's worked example as ``actor.worked_example`` does; its reply carries no
    loss (``"loss": false``)."""
    rules = family(env)
    if goal_in_thought and rules.goal is None:
        raise ValueError(f"{env}: the env family states no goal line to restate")
    (sid,) = pool.create(1)
    try:
        (observation,) = pool.reset([sid], [task_id])
        if goal_in_thought:
            goal = rules.goal(observation)
            if goal is None:
                raise ValueError(f"{env} task {task_id}: no goal line in the first observation")
            steps = [Step(s.action, f"My goal: {goal}. {s.thought}") for s in steps]
        messages: list[dict[str, Any]] = initial_messages(
            env, observation, worked_example=worked_example
        )
        for m in messages[1:-1]:  # the worked example's exchange is prompt
            if m["role"] == "assistant":
                m["loss"] = False
        reward, done, truncated = 0.0, False, False
        for step in steps:
            messages.append({"role": "assistant", "content": reply_text(step, env)})
            batch = pool.step([sid], [step.action])
            if batch.errors[0] is not None:
                raise RuntimeError(batch.errors[0])
            reward += float(batch.rewards[0])
            done, truncated = bool(batch.dones[0]), bool(batch.truncated[0])
            if done or truncated:
                break
            messages.append({"role": "user", "content": batch.observations[0]})
        outcome = rules.outcome(reward, done, truncated)
        return {
            "env": env,
            "task_id": task_id,
            "reward": reward,
            "success": outcome.success,
            "num_turns": sum(
                m["role"] == "assistant" and m.get("loss") is not False for m in messages
            ),  # fmt: skip
            "messages": messages,
        }
    finally:
        pool.close([sid])


def reply_text(step: Step, env: str = "generic") -> str:
    """The agent's reply for ``step`` in ``env``'s family's format (AgentGym's "Thought: ...
    Action: ..." unless the family has its own)."""
    return family(env).format_reply(step.thought, step.action)
