"""The learner in a multi-env run: a horizon controller per env (moved by its own episodes,
sent out as per-env caps, restored on resume) and per-env reward scale and loss weight."""

from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import make_groups, tiny_model  # noqa: E402

from agentgym.horizon import HorizonConfig  # noqa: E402
from agentgym.learner import EnvTraining, Learner, LearnerConfig  # noqa: E402


@pytest.mark.parametrize("schedule", ["stepwise", "adaptive"])
def test_each_envs_horizon_moves_on_its_own_episodes_and_survives_a_resume(tmp_path, schedule):
    if schedule == "stepwise":
        horizons = {
            "babyai": HorizonConfig(schedule="stepwise", rounds=(2, 3, 4), every=1),
            "textcraft": HorizonConfig(schedule="stepwise", rounds=(5, 9), every=2),
        }
    else:
        horizons = {
            "babyai": HorizonConfig(schedule="adaptive", start=2, max_cap=6, window=2),
            "textcraft": HorizonConfig(schedule="fixed", cap=4),
        }
    envs = {k: EnvTraining(h) for k, h in horizons.items()}
    cfg = LearnerConfig(groups_per_step=2, checkpoint_dir=str(tmp_path))
    data = [make_groups(tiny_model(), seed=s) for s in range(4)]  # env alternates by group

    def run(learner, batches):
        for d in batches:
            caps = {t.env: learner.control().cap_of(t.env) for t in d}
            learner.step([_with_cap(t, caps[t.env]) for t in d])

    whole = Learner(tiny_model(), cfg, envs=envs)
    run(whole, data)
    first = Learner(tiny_model(), cfg, envs=envs)
    run(first, data[:2])
    first.save_checkpoint()
    resumed = Learner(tiny_model(), cfg, envs=envs)
    resumed.load_checkpoint(tmp_path)
    assert resumed.control().caps == first.control().caps
    run(resumed, data[2:])
    assert resumed.control().caps == whole.control().caps
    if schedule == "stepwise":
        assert whole.control().caps == {"babyai": 4, "textcraft": 9}
    other = Learner(tiny_model(), cfg, envs={"search": EnvTraining(HorizonConfig())})
    with pytest.raises(ValueError, match="no horizon state for env 'search'"):
        other.load_checkpoint(tmp_path)


def _with_cap(t, cap):
    return replace(t, horizon_cap=cap)


def test_reward_scale_and_loss_weight_apply_to_their_env_only():
    envs = {
        "babyai": EnvTraining(HorizonConfig(), loss_weight=0.0, reward_scale=10.0),
        "textcraft": EnvTraining(HorizonConfig()),
    }
    learner = Learner(tiny_model(), LearnerConfig(), envs=envs)
    trajectories = make_groups(tiny_model(), seed=1)
    scaled = learner._scale_rewards(trajectories)
    for before, after in zip(trajectories, scaled, strict=True):
        factor = 10.0 if before.env == "babyai" else 1.0
        assert after.reward == before.reward * factor
    weights = learner._loss_weights(trajectories).tolist()
    assert weights == [0.0 if t.env == "babyai" else 1.0 for t in trajectories]


def test_the_learner_sends_each_stage_logs_it_and_keeps_it_across_a_resume(tmp_path):
    from agentgym.curriculum import CurriculumConfig

    cfg = LearnerConfig(groups_per_step=2, checkpoint_dir=str(tmp_path))
    stages = CurriculumConfig(stages=((0,), (1,)), promote_at=0.5, window=4)
    learner = Learner(tiny_model(), cfg, curricula={"babyai": stages})
    groups = make_groups(tiny_model(), seed=1)  # half of them babyai, half successes
    babyai = [replace(t, success=True, task_id=40) if t.env == "babyai" else t for t in groups]
    metrics = learner.step(babyai)
    assert metrics["curriculum_stage/babyai"] == 1 and learner.control().env_stages == {"babyai": 1}
    learner.save_checkpoint()
    resumed = Learner(tiny_model(), cfg, curricula={"babyai": stages})
    resumed.load_checkpoint(tmp_path)
    assert resumed.control().env_stages == {"babyai": 1}


def test_the_learner_sends_moving_env_weights_and_keeps_them_across_a_resume(tmp_path):
    from agentgym.curriculum import EnvMix, EnvMixConfig

    cfg = LearnerConfig(groups_per_step=2, checkpoint_dir=str(tmp_path))
    config = EnvMixConfig(mode="by_failure", window=8, floor=0.1)

    def mix():
        return EnvMix(config, {"babyai": 1.0, "textcraft": 1.0})

    learner = Learner(tiny_model(), cfg, env_mix=mix())
    groups = make_groups(tiny_model(), seed=1)  # one group per env, half of each succeeds
    metrics = learner.step(groups)
    sent = learner.control().env_weights
    assert sent == {"babyai": 0.5, "textcraft": 0.5} and metrics["env_weight/babyai"] == 0.5
    learner.save_checkpoint()
    resumed = Learner(tiny_model(), cfg, env_mix=mix())
    resumed.load_checkpoint(tmp_path)
    assert resumed.control().env_weights == sent
    fixed = Learner(tiny_model(), cfg, env_mix=EnvMix(EnvMixConfig(), {"babyai": 1.0}))
    assert fixed.control().env_weights == {}
