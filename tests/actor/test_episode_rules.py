"""The episode rules are declared once (``EpisodeRules``) and flow whole from the config to the
actor to the episode code."""

from __future__ import annotations

from dataclasses import fields

from agentgym.actor.actor import ActorSettings
from agentgym.actor.config import ActorConfig, EpisodeRules
from agentgym.actor.episodes import EpisodeSpec
from agentgym.config import load_config


def test_the_config_hands_its_flat_keys_over_as_one_rules_value():
    sets = ["actor.max_context_tokens=1000", "actor.reply_format=bare",
            "actor.invalid_reply_penalty=0.5", "actor.task_reward=0"]  # fmt: skip
    config = load_config(None, sets)
    rules = config.actor.rules
    assert type(rules) is EpisodeRules
    assert (rules.max_context_tokens, rules.reply_format) == (1000, "bare")
    assert (rules.invalid_reply_penalty, rules.task_reward) == (0.5, 0.0)
    assert {f.name for f in fields(EpisodeRules)} <= {f.name for f in fields(ActorConfig)}


def test_one_default_for_each_rule_everywhere():
    assert ActorConfig().rules == EpisodeRules()
    assert ActorSettings(env="babyai", task_ids=(0,)).rules == EpisodeRules()
    assert EpisodeSpec("babyai", 0, 0, 1, None).rules == EpisodeRules()


def test_per_env_and_eval_views_of_the_rules():
    rules = EpisodeRules(worked_example=True, invalid_reply_penalty=0.2, task_reward=0.5)
    assert rules.for_env("babyai").worked_example  # BabyAI has a worked example
    assert not rules.for_env("webnav").worked_example  # webnav has none
    scored = rules.scored_by_env()
    assert (scored.invalid_reply_penalty, scored.task_reward) == (0.0, 1.0)
    assert scored.worked_example
