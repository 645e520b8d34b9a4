"""The mutants ``tests/mutation/run.py`` applies: small wrong changes to the code that decides
what a run trains on (learner, batch, losses, advantages, turns, episodes, eval), each of which a
fast test must catch.

A mutant replaces one exact snippet of one file (the snippet must occur exactly once there:
``test_mutants.py`` checks it, so a refactor that moves the code shows up as a stale mutant,
not as a silent pass) and names the fast tests that should kill it, fastest first.
"""

from __future__ import annotations

from dataclasses import dataclass

QUICKSTART = "tests/cli/test_quickstart.py"
"""The end-to-end net, last in a suite: it runs only for a mutant the unit tests let live."""

SUITES: dict[str, tuple[str, ...]] = {
    "learner": (
        "tests/learner/test_direction.py",
        "tests/learner/test_temperature.py",
        "tests/learner/test_learner.py",
        "tests/learner/test_learner_envs.py",
        QUICKSTART,
    ),
    "losses": (
        "tests/learner/test_losses.py",
        "tests/learner/test_direction.py",
        "tests/learner/test_temperature.py",
        QUICKSTART,
    ),
    "advantages": (
        "tests/learner/test_advantages.py",
        "tests/learner/test_direction.py",
        QUICKSTART,
    ),
    "batch": (
        "tests/learner/test_group_order.py",
        "tests/learner/test_direction.py",
        "tests/learner/test_learner.py",
        QUICKSTART,
    ),
    "actor": (
        "tests/actor/test_budget_cuts.py",
        "tests/agent/test_turns.py",
        "tests/http/test_sciworld_rules.py",
        "tests/actor/test_actor.py",
    ),
    "eval": ("tests/cli/test_train_eval.py", "tests/cli/test_multi_env.py"),
}
"""Fast test files per part of the code, fastest first (run with ``-m "not slow"`` and ``-x``)."""


@dataclass(frozen=True)
class Mutant:
    """One wrong change: ``old`` becomes ``new`` in ``path`` (under ``python/agentgym``)."""

    name: str
    path: str
    old: str
    new: str
    suite: str
    """Key of ``SUITES``: the tests that should kill it."""


LEARNER = "learner/learner.py"
LOSSES = "learner/losses.py"
ADV = "learner/advantages.py"
FORWARD = "learner/forward.py"
UPDATE = "learner/update.py"
BATCH = "learner/batch.py"

MUTANTS: tuple[Mutant, ...] = (
    # --- the eight of issue 34 ------------------------------------------------------------------
    Mutant(
        "advantage sign flipped where the estimator table calls GRPO", ADV,
        "return grpo(x.rewards, x.group_index, x.loss_mask, normalize_std=True, eps=a.eps), None",
        "return -grpo(x.rewards, x.group_index, x.loss_mask, normalize_std=True, eps=a.eps), None",
        "advantages",
    ),
    Mutant(
        "importance correction off (behaviour log-probs replaced by pi_prox)", UPDATE,
        "            out.logp, prox, mb.behav_logp,\n",
        "            out.logp, prox, prox,\n",
        "learner",
    ),
    Mutant(
        "collate puts the whole batch in one group", BATCH,
        "group_index = [groups.setdefault(t.group_id, len(groups)) for t in trajectories]",
        "group_index = [0 for t in trajectories]",
        "batch",
    ),
    Mutant(
        "loss_weight not applied to the advantages", UPDATE,
        "prep = replace(prep, advantages=prep.advantages * weights[:, None])",
        "prep = replace(prep, advantages=prep.advantages)",
        "learner",
    ),
    Mutant(
        "entropy bonus sign flipped", UPDATE,
        "loss = loss - cfg.entropy_coef * entropy_loss",
        "loss = loss + cfg.entropy_coef * entropy_loss",
        "learner",
    ),
    Mutant(
        "KL loss sign flipped", UPDATE,
        "loss = loss + cfg.kl_coef * kl_loss",
        "loss = loss - cfg.kl_coef * kl_loss",
        "learner",
    ),
    Mutant(
        "GAE KL reward sign flipped", ADV,
        "token_rewards = token_rewards - a.kl_reward_coef * x.kl",
        "token_rewards = token_rewards + a.kl_reward_coef * x.kl",
        "advantages",
    ),
    Mutant(
        "learner log-probs at T = 1 (forward_tokens ignores the temperature)", FORWARD,
        "out.logits, batch.tokens, batch.loss_mask, temperature,",
        "out.logits, batch.tokens, batch.loss_mask, 1.0,",
        "learner",
    ),
    Mutant(
        "Pass@k counts tasks solved by all k samples", "cli/eval.py",
        'f"pass@{k}": sum(any(s) for s in tasks.values())',
        'f"pass@{k}": sum(all(s) for s in tasks.values())',
        "eval",
    ),
    Mutant(
        "clip fraction counts the unclipped tokens", LOSSES,
        "stats = _loss_stats(clipped > unclipped, dual_hit, w, m, logp, prox_logp)",
        "stats = _loss_stats(clipped < unclipped, dual_hit, w, m, logp, prox_logp)",
        "losses",
    ),
    Mutant(
        "approx KL to pi_prox with the sign flipped", LOSSES,
        "((prox_logp - logp) * m).sum() / n,",
        "((logp - prox_logp) * m).sum() / n,",
        "losses",
    ),
    # --- the same faults elsewhere ----------------------------------------------------------------
    Mutant(
        "advantage sign flipped where the estimator table calls RLOO", ADV,
        "return rloo(x.rewards, x.group_index, x.loss_mask), None",
        "return -rloo(x.rewards, x.group_index, x.loss_mask), None",
        "advantages",
    ),
    Mutant(
        "advantage sign flipped where the estimator table calls REINFORCE++", ADV,
        "adv = reinforce_pp(x.rewards, x.loss_mask, kl=x.kl,",
        "adv = -reinforce_pp(x.rewards, x.loss_mask, kl=x.kl,",
        "advantages",
    ),
    Mutant(
        "outcome reward negated before GAE", ADV,
        "token_rewards = outcome_token_rewards(x.rewards, x.loss_mask)",
        "token_rewards = -outcome_token_rewards(x.rewards, x.loss_mask)",
        "advantages",
    ),
    Mutant(
        "KL reward estimate reversed (log ref - log pi)", UPDATE,
        'kl_estimate(prox_logp, ref_logp, "k1")',
        'kl_estimate(ref_logp, prox_logp, "k1")',
        "learner",
    ),
    Mutant(
        "reward_scale not applied", LEARNER,
        "replace(t, reward=t.reward * scales[t.env]) if t.env in scales else t",
        "replace(t, reward=t.reward) if t.env in scales else t",
        "learner",
    ),
    Mutant(
        "packed passes (pi_prox and training) at T = 1", UPDATE,
        "                self.cfg.temperature, value_head, entropy_grad,\n",
        "                1.0, value_head, entropy_grad,\n",
        "learner",
    ),
    Mutant(
        "padded passes (pi_prox and training) at T = 1", UPDATE,
        "forward_tokens(model, mb, self.cfg.temperature, value_head, entropy_grad)",
        "forward_tokens(model, mb, 1.0, value_head, entropy_grad)",
        "learner",
    ),
    Mutant(
        "token_logprobs ignores the temperature", LOSSES,
        "logp = F.log_softmax(selected.float() / temperature, dim=-1)",
        "logp = F.log_softmax(selected.float(), dim=-1)",
        "losses",
    ),
    Mutant(
        "actors sample at T = 1 whatever the config says", "actor/policy.py",
        "return SamplingParams(max_new_tokens=e.max_new_tokens, temperature=e.temperature)",
        "return SamplingParams(max_new_tokens=e.max_new_tokens, temperature=1.0)",
        "actor",
    ),
    Mutant(
        "gradients not zeroed between minibatches", UPDATE,
        "self.optimizer.zero_grad(set_to_none=True)",
        "None",
        "learner",
    ),
    # --- the loss -------------------------------------------------------------------------------
    Mutant(
        "PPO takes the smaller of the clipped and unclipped losses", LOSSES,
        "per_token = torch.maximum(unclipped, clipped)",
        "per_token = torch.minimum(unclipped, clipped)",
        "losses",
    ),
    Mutant(
        "ratio inverted (pi_prox / pi_theta)", LOSSES,
        "ratio = (logp - prox_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()",
        "ratio = (prox_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()",
        "losses",
    ),
    Mutant(
        "importance weights inverted (mu / pi_prox)", LOSSES,
        "log_w = (prox_logp - behav_logp).detach() * m",
        "log_w = (behav_logp - prox_logp).detach() * m",
        "losses",
    ),
    Mutant(
        "importance weights not truncated at the cap", LOSSES,
        "return w.clamp(max=cap) * m",
        "return w * m",
        "losses",
    ),
    Mutant(
        "micro-batch losses normalised by their own token count", LOSSES,
        "n = per_seq_tokens.sum() if num_tokens is None else num_tokens",
        "n = per_seq_tokens.sum()",
        "losses",
    ),
    # --- advantages -----------------------------------------------------------------------------
    Mutant(
        "GRPO does not divide by the group's std", ADV,
        "centered = torch.where(std > 0, centered / (std + eps), torch.zeros_like(centered))",
        "centered = torch.where(std > 0, centered, torch.zeros_like(centered))",
        "advantages",
    ),
    Mutant(
        "RLOO's baseline includes the episode itself", ADV,
        "baseline = (sums[group_index] - r) / (n - 1).clamp(min=1)",
        "baseline = sums[group_index] / n",
        "advantages",
    ),
    Mutant(
        "outcome reward on the sequence's last token, not the last generated one", ADV,
        "out[has.nonzero(as_tuple=True)[0], last[has]] = rewards[has]",
        "out[has.nonzero(as_tuple=True)[0], -1] = rewards[has]",
        "advantages",
    ),
    Mutant(
        "GAE does not bootstrap from the next value", ADV,
        "delta = token_rewards[:, t] + gamma * next_value - values[:, t]",
        "delta = token_rewards[:, t] - values[:, t]",
        "advantages",
    ),
    # --- batch ----------------------------------------------------------------------------------
    Mutant(
        "collate drops the behaviour log-probs", BATCH,
        "logp[i, :n] = np.where(t.loss_mask > 0, t.logprobs, 0.0)",
        "logp[i, :n] = 0.0",
        "batch",
    ),
    Mutant(
        "staleness bound off by one", BATCH,
        "if all(version - t.min_version <= self.max_staleness for t in group):",
        "if all(version - t.min_version < self.max_staleness for t in group):",
        "batch",
    ),
    # --- turns and episodes ---------------------------------------------------------------------
    Mutant(
        "environment tokens get loss mask 1", "agent/turns.py",
        "self.loss_mask.extend([0] * len(tokens))",
        "self.loss_mask.extend([1] * len(tokens))",
        "actor",
    ),
    Mutant(
        "sampled tokens lose their behaviour log-probs", "agent/turns.py",
        "self.logprobs.extend(float(x) for x in logprobs)",
        "self.logprobs.extend(0.0 for x in logprobs)",
        "actor",
    ),
    Mutant(
        "invalid-reply penalty added instead of subtracted", "actor/episodes.py",
        "reward=spec.rules.task_reward * e.reward - format_penalty(spec.rules, e),",
        "reward=spec.rules.task_reward * e.reward + format_penalty(spec.rules, e),",
        "actor",
    ),
    Mutant(
        "one turn past the horizon cap", "actor/episodes.py",
        "elif spec.horizon_cap is not None and turns >= spec.horizon_cap:",
        "elif spec.horizon_cap is not None and turns > spec.horizon_cap:",
        "actor",
    ),
    Mutant(
        "episode reward is the last step's, not the sum", "actor/episodes.py",
        "ep.reward += float(batch.rewards[k])",
        "ep.reward = float(batch.rewards[k])",
        "actor",
    ),
    Mutant(
        "group ids repeat (a wrapping counter)", "actor/actor.py",
        "group_id = next(self._group_ids)",
        "group_id = next(self._group_ids) % 4",
        "actor",
    ),
    Mutant(
        "a group runs on the first env's pool", "actor/actor.py",
        "pool = self.pools[spec.env]",
        "pool = next(iter(self.pools.values()))",
        "actor",
    ),
    # --- issue 49: what a step trains on, and with what weight ------------------------------------
    Mutant(
        "token sum divided by the batch's tokens, not the run's constant", LOSSES,
        "return (values * m).sum() / norm_tokens",
        "return (values * m).sum() / m.sum().clamp(min=1)",
        "losses",
    ),
    Mutant(
        "a step without signal still runs the optimizer", UPDATE,
        "flat = self._without_signal(prep)",
        "flat = False",
        "learner",
    ),
    Mutant(
        "groups leave in completion order", BATCH,
        'eligible = self._ready if self.order == "completion" else self._in_start_order()',
        "eligible = self._ready",
        "batch",
    ),
    Mutant(
        "a strict schedule admits groups of another cap", LEARNER,
        "lambda g: self._strict(g[0].env) and g[0].horizon_cap != self._cap_now(g[0].env),",
        "lambda g: False,",
        "learner",
    ),
    Mutant(
        "a budget cut counted as a format error", "actor/episodes.py",
        "ep.budget_cuts += int(cut)",
        "ep.budget_cuts += 0",
        "actor",
    ),
    Mutant(
        "the per-episode penalty is the per-reply one", "actor/episodes.py",
        "return rules.invalid_reply_penalty * penalised / max(len(e.turn_finish), 1)",
        "return rules.invalid_reply_penalty * penalised",
        "actor",
    ),
    # --- eval -----------------------------------------------------------------------------------
    Mutant(
        "Avg@k divides by tasks instead of episodes", "cli/eval.py",
        'f"avg@{k}": sum(bool(e.get("success")) for e in episodes) / n,',
        'f"avg@{k}": sum(bool(e.get("success")) for e in episodes) / max(len(tasks), 1),',
        "eval",
    ),
    Mutant(
        "episodes whose env failed are left out of Avg@k", "cli/eval.py",
        "n = max(len(episodes), 1)",
        'n = max(sum("error" not in e for e in episodes), 1)',
        "eval",
    ),
)  # fmt: skip
