"""The learner on a tiny random transformers model: updates, estimators, staleness, resume."""

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from learner_helpers import make_groups, tiny_model  # noqa: E402

from agentgym.horizon import HorizonConfig  # noqa: E402
from agentgym.learner import (  # noqa: E402
    AdvantageConfig,
    GroupBuffer,
    Learner,
    LearnerConfig,
    LossConfig,
    OptimConfig,
)
from agentgym.learner.config import KL_REWARD_ESTIMATORS  # noqa: E402
from agentgym.learner.update import PolicyUpdate  # noqa: E402


def config(**kw) -> LearnerConfig:
    # make_groups' group ids are not task stream positions: groups leave as they complete
    # (the start order, by stream position, has tests of its own below)
    base = dict(optim=OptimConfig(lr=3e-3), micro_batch_size=3, groups_per_step=2,
                train_order="completion")  # fmt: skip
    return LearnerConfig(**{**base, **kw})


def params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_step_changes_params_and_lowers_loss_on_fixed_batch():
    model = tiny_model()
    levels = lambda env, task_id: f"level {task_id % 40}" if env == "babyai" else None  # noqa: E731
    learner = Learner(model, config(minibatches=2), task_group=levels)
    trajs = make_groups(model)
    before = params(model)
    loss0 = learner.evaluate_loss(trajs)
    metrics = learner.step(trajs)
    assert learner.version == 1 and metrics["version"] == 1
    assert any(not torch.equal(before[k], v) for k, v in params(model).items())
    for _ in range(4):
        learner.step(trajs)
    assert learner.evaluate_loss(trajs) < loss0 - 1e-3
    # first update: mu == pi_prox exactly, so every IS weight is 1
    assert metrics["is_weight_mean"] == pytest.approx(1.0)
    assert metrics["is_weight_max"] == pytest.approx(1.0)
    for key in ("loss/policy", "clip_fraction", "grad_norm", "tokens_per_s", "reward/babyai"):
        assert key in metrics
    # success per group of tasks where the run gives one (BabyAI's level), none elsewhere
    assert metrics["success/babyai/level_1"] == 0.5
    assert not any(k.startswith("success/textcraft/") for k in metrics)
    assert not any(k.count("/") > 1 for k in Learner(model, config()).step(trajs))


def test_the_runs_task_groups_are_babyais_levels_only():
    from agentgym.cli.learner import task_groups
    from agentgym.config import load_config

    multi = Path(__file__).resolve().parents[2] / "configs" / "multi.yaml"
    group = task_groups(load_config(multi, []))
    assert group("babyai", 43) == "level 3"
    assert group("textcraft", 5) is None  # its depth needs the env's info


@pytest.mark.parametrize(
    "estimator", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"]
)
def test_every_estimator_trains(estimator):
    model = tiny_model()
    kl_reward = 0.01 if estimator in KL_REWARD_ESTIMATORS else 0.0
    cfg = config(
        advantage=AdvantageConfig(estimator=estimator, kl_reward_coef=kl_reward),
        loss=LossConfig(kl_coef=0.05, entropy_coef=0.01, dual_clip=3.0, norm_tokens=64),
        bf16=estimator == "grpo",
    )
    learner = Learner(model, cfg)
    before = params(model)
    metrics = learner.step(make_groups(model))
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values() if isinstance(v, float))
    assert any(not torch.equal(before[k], v) for k, v in params(model).items())
    if estimator == "gae":
        assert metrics["loss/value"] > 0


def test_stale_groups_are_dropped_and_counted():
    model = tiny_model()
    buf = GroupBuffer(max_staleness=2, order="completion")
    fresh = make_groups(model, num_groups=1, version=5, seed=1)
    old = make_groups(model, num_groups=1, version=2, seed=2)
    partial = make_groups(model, num_groups=1, version=1, seed=3)[:2]
    buf.add(fresh + old + partial)
    assert buf.num_ready == 2 and buf.num_pending == 2
    assert buf.pop_groups(2, version=5) is None  # old lags 3 > 2: dropped with the partial
    assert buf.stats.dropped_stale == 4 + 2 and buf.num_pending == 0
    (group,) = buf.pop_groups(1, version=5)
    assert [t.group_id for t in group] == [1000] * 4
    assert buf.stats.staleness == {0: 4}
    buf.add(fresh[:1])  # a duplicate episode id of a group that already left starts anew
    buf.add(fresh[:1])
    assert buf.stats.dropped_duplicate == 1


def test_incomplete_groups_of_a_relaunched_actor_are_dropped_and_counted():
    """Once a relaunch of actor 0 (launch 1 in its group ids) delivers, actor 0's first
    process will never finish its open groups; actor 1's open group is kept."""
    from dataclasses import replace

    from agentgym.transport.ids import next_ids

    model = tiny_model()
    a, b, c = (make_groups(model, num_groups=1, seed=s) for s in (1, 2, 3))
    old0, new0, one = next(next_ids(0, 0)), next(next_ids(0, 1)), next(next_ids(1, 0))
    buf = GroupBuffer(max_staleness=2, order="completion")
    buf.add([replace(t, group_id=old0) for t in a[:2]])
    buf.add([replace(t, group_id=one) for t in b[:3]])
    assert buf.num_pending == 5
    buf.add([replace(t, group_id=new0) for t in c])
    assert buf.stats.dropped_superseded == 2 and buf.num_pending == 3 and buf.num_ready == 1
    buf.add([replace(t, group_id=one) for t in b[3:]])
    assert buf.num_ready == 2 and buf.stats.dropped_superseded == 2


def _from(model, index, launch, position, seed, version=0):
    """One group of ``make_groups`` as the group at ``position`` of an actor's task stream."""
    from dataclasses import replace

    from agentgym.transport.ids import next_ids

    gid = next(next_ids(index, launch, position))
    return [replace(t, group_id=gid) for t in make_groups(model, 1, seed=seed, version=version)]


def test_the_learner_tells_each_actor_process_which_of_its_groups_it_dropped():
    """An actor counts the groups it started against its look-ahead; those dropped as too
    stale were never trained, and the control says how many, per (index, launch)."""
    model = tiny_model()
    learner = Learner(model, config(max_staleness=1, groups_per_step=1))
    learner.version = 3
    learner.ingest(_from(model, 0, 1, 0, seed=1, version=1)  # 2 behind: dropped
                   + _from(model, 0, 1, 1, seed=2, version=1)  # dropped
                   + _from(model, 1, 0, 0, seed=3, version=0)  # dropped
                   + _from(model, 0, 1, 2, seed=4, version=3))  # fmt: skip
    assert learner.train_ready()["version"] == 4
    assert learner.control().dropped_groups == {(0, 1): 2, (1, 0): 1}
    assert learner.buffer.stats.dropped_stale == 12


def test_task_streams_go_on_where_the_learner_received_and_after_a_resume_where_it_trained(
    tmp_path,
):
    """Live, a (re)launched actor starts past the newest group received from its index; a
    checkpoint keeps how far training used each stream, so the actors of a resumed run
    sample again the groups that were received but not trained on."""
    model = tiny_model()
    cfg = config(groups_per_step=1, checkpoint_dir=str(tmp_path))
    learner = Learner(model, cfg)
    learner.ingest(_from(model, 0, 0, 0, seed=1) + _from(model, 1, 0, 4, seed=2))
    assert learner.train_ready() is not None  # one group of the two
    learner.ingest(_from(model, 0, 0, 1, seed=3))
    assert learner.control().task_streams == {0: 2, 1: 5}
    learner.save_checkpoint()
    resumed = Learner(tiny_model(), cfg)
    resumed.load_checkpoint(tmp_path)
    assert resumed.control().task_streams == {0: 1}
    assert resumed.buffer.stats.received == 4  # the trained group's episodes only
    resumed.ingest(_from(model, 1, 1, 5, seed=4))
    assert resumed.control().task_streams == {0: 1, 1: 6}


def test_groups_leave_the_buffer_in_id_order_whatever_order_they_arrived_in():
    model = tiny_model()
    groups = [make_groups(model, num_groups=1, seed=s) for s in (3, 1, 2)]
    buf = GroupBuffer(max_staleness=2, order="completion")
    for g in groups:
        buf.add(list(reversed(g)))
    popped = buf.pop_groups(3, version=0)
    assert [g[0].group_id for g in popped] == [1000, 2000, 3000]
    assert all([t.episode_id for t in g] == sorted(t.episode_id for t in g) for g in popped)


def test_learner_buffer_path_trains_only_fresh_groups():
    model = tiny_model()
    learner = Learner(model, config(max_staleness=0, groups_per_step=1))
    learner.ingest(make_groups(model, num_groups=1, seed=1))
    assert learner.train_ready()["version"] == 1
    learner.ingest(make_groups(model, num_groups=1, seed=2, version=0))  # now 1 behind
    assert learner.train_ready() is None
    assert learner.buffer.stats.dropped_stale == 4


def test_checkpoint_resume_is_exact(tmp_path):
    horizon = HorizonConfig(schedule="stepwise", rounds=(2, 3, 4), every=2)
    cfg = config(horizon=horizon, minibatches=2, checkpoint_dir=str(tmp_path))
    data = [make_groups(tiny_model(), seed=s) for s in range(4)]

    whole = Learner(tiny_model(), cfg)
    for d in data:
        whole.step(d)

    first = Learner(tiny_model(), cfg)
    for d in data[:2]:
        first.step(d)
    first.save_checkpoint()
    resumed = Learner(tiny_model(seed=7), cfg)
    resumed.load_checkpoint(tmp_path)
    assert resumed.version == 2 and resumed.horizons[""].cap == 3
    for d in data[2:]:
        resumed.step(d)
    assert (
        resumed.version == whole.version and resumed.horizons[""].cap == whole.horizons[""].cap == 4
    )
    for k, v in params(whole.model).items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    state = json.loads((tmp_path / "step_00000002" / "state.json").read_text())
    assert state["horizons"][""]["steps"] == 2


def test_a_checkpoint_of_the_run_and_env_horizons_resumes_into_one_env_list(tmp_path):
    """A ``state.json`` that holds the run's controller as ``horizon`` (and a multi-env run's
    as ``env_horizons``) resumes a learner of one env under its name, and one of several."""
    from agentgym.durable import write_manifest
    from agentgym.learner import EnvTraining

    horizon = HorizonConfig(schedule="stepwise", rounds=(2, 3, 4), every=1)
    first = Learner(tiny_model(), config(horizon=horizon, checkpoint_dir=str(tmp_path / "one")))
    first.step(make_groups(tiny_model()))
    path = first.save_checkpoint()
    state = json.loads((path / "state.json").read_text())
    run = state.pop("horizons")[""]
    (path / "state.json").write_text(json.dumps({**state, "horizon": run, "env_horizons": {}}))
    write_manifest(path)
    one = Learner(tiny_model(), config(horizon=horizon), envs={"babyai": EnvTraining(horizon)})
    one.load_checkpoint(path)
    assert one.control().caps == {"babyai": 3} == {"babyai": first.horizons[""].cap}

    envs = {"babyai": EnvTraining(horizon), "textcraft": EnvTraining(horizon)}
    multi = Learner(tiny_model(), config(checkpoint_dir=str(tmp_path / "multi")), envs=envs)
    multi.step(make_groups(tiny_model()))
    path = multi.save_checkpoint()
    state = json.loads((path / "state.json").read_text())
    envs_state = state.pop("horizons")
    old = {**state, "horizon": run, "env_horizons": envs_state}
    (path / "state.json").write_text(json.dumps(old))
    write_manifest(path)
    resumed = Learner(tiny_model(), config(), envs=envs)
    resumed.load_checkpoint(path)
    assert resumed.control().caps == multi.control().caps


def test_actor_launch_counts_survive_a_resume(tmp_path):
    """A resumed run's actors get launch numbers after the first run's (so their group ids
    and task draws differ from the first run's)."""
    from agentgym.transport.registry import ActorRegistry

    first = Learner(tiny_model(), config(checkpoint_dir=str(tmp_path)))
    first._registry = ActorRegistry()
    assert [first._registry.launch_of(f"h:{i}:{i}", i) for i in range(3)] == [0, 0, 0]
    first.save_checkpoint()
    resumed = Learner(tiny_model(), config(checkpoint_dir=str(tmp_path)))
    resumed.load_checkpoint(tmp_path)
    registry = ActorRegistry()
    registry.restore_launches(resumed._actor_launches)
    assert [registry.launch_of(f"h2:{i}:{i}", i) for i in range(3)] == [1, 1, 1]


def test_keep_checkpoints_deletes_all_but_the_newest(tmp_path):
    cfg = config(checkpoint_dir=str(tmp_path), keep_checkpoints=2)
    learner = Learner(tiny_model(), cfg)
    for seed in range(3):
        learner.step(make_groups(learner.model, seed=seed))
        learner.save_checkpoint()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "step_00000002", "step_00000003"]
    assert (tmp_path / "latest").read_text() == "step_00000003"


@pytest.mark.parametrize("loss", [LossConfig(), LossConfig(kl_coef=0.05, entropy_coef=0.01)])
def test_first_minibatch_prox_from_its_own_pass_gives_the_recomputed_update(monkeypatch, loss):
    """pi_prox taken (detached) from the first minibatch's training pass: the same update as
    with a separate recompute pass, across epochs and minibatches."""
    trajs = make_groups(tiny_model())
    results = []
    for reuse in (True, False):
        model = tiny_model()
        learner = Learner(model, config(minibatches=2, ppo_epochs=2, loss=loss))
        assert learner.update.prox_from_first_pass
        monkeypatch.setattr(PolicyUpdate, "prox_from_first_pass", reuse)
        metrics = [learner.step(trajs) for _ in range(2)]
        monkeypatch.undo()
        results.append((params(model), metrics))
    (p1, m1), (p2, m2) = results
    for k in p1:
        assert torch.allclose(p1[k], p2[k], atol=1e-6), k
    for a, b in zip(m1, m2, strict=True):
        for key in ("loss/policy", "loss/kl", "clip_fraction", "approx_kl_prox", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    gae = Learner(tiny_model(), config(advantage=AdvantageConfig(estimator="gae")))
    kl_reward = Learner(
        tiny_model(),
        config(advantage=AdvantageConfig(estimator="reinforce_pp", kl_reward_coef=0.1)),
    )
    assert not gae.update.prox_from_first_pass
    assert not kl_reward.update.prox_from_first_pass


class NoKeepWrapper(torch.nn.Module):
    """A causal LM whose forward has no ``logits_to_keep``: logits at every position."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, **kwargs):
        return self.lm(input_ids=input_ids, **kwargs)


def test_logits_kept_only_where_generated_tokens_are_predicted_give_the_same_logprobs():
    from agentgym.learner.batch import collate
    from agentgym.learner.forward import forward_tokens
    from agentgym.models import keeps_logits

    model = tiny_model()
    batch = collate(make_groups(model))
    assert keeps_logits(model) and not keeps_logits(NoKeepWrapper(model))
    kept = forward_tokens(model, batch, 0.7)
    full = forward_tokens(NoKeepWrapper(model), batch, 0.7)
    on = batch.loss_mask > 0
    assert on.any() and not on.all()
    assert torch.allclose(kept.logp, full.logp, atol=1e-5)
    assert torch.allclose(kept.entropy, full.entropy, atol=1e-5)
    assert (kept.logp[~on] == 0).all() and (kept.logp[on] < 0).all()


def test_file_mode_publishes_a_safetensors_file_and_keeps_two(tmp_path):
    """weights_via=file: each publish writes v<version>.safetensors (the policy's tensors,
    readable by safetensors) and serves its path; only the newest two files stay."""
    from safetensors.torch import load_file

    from agentgym.transport.endpoints import Endpoints
    from agentgym.transport.learner_channels import LearnerChannels
    from agentgym.transport.weights import WeightRequest

    model = tiny_model()
    learner = Learner(model, config(weights_via="file", weights_dir=str(tmp_path / "w")))
    trajs = make_groups(model)
    (tmp_path / "s").mkdir()
    with LearnerChannels(Endpoints.ipc(tmp_path / "s")) as channels:
        for _ in range(3):
            learner.publish(channels, weights=True)
            learner.step(trajs)
        learner.publish(channels, weights=True)
        reply = channels.weights.answer(WeightRequest(1, -1))
    assert reply.status == "ok" and reply.version == 3 and reply.tensors == ()
    assert reply.path == str(tmp_path / "w" / "v00000003.safetensors")
    saved = load_file(reply.path)
    for name, value in model.state_dict().items():
        assert torch.equal(saved[name], value), name
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == [
        "v00000002.safetensors", "v00000003.safetensors",
    ]  # fmt: skip


def test_a_step_whose_gradient_is_not_finite_is_skipped_and_counted():
    """One overflow in a minibatch would turn every parameter and AdamW moment into NaN: the
    step is dropped instead, counted, and training goes on."""
    model = tiny_model()
    learner = Learner(model, config())
    trajs = make_groups(model)
    before = params(model)
    weight = model.get_input_embeddings().weight
    poison = weight.register_hook(lambda g: g * float("inf"))
    metrics = learner.step(trajs)
    assert metrics["skipped_steps"] == 1 and metrics["skipped_steps_total"] == 1
    assert not math.isfinite(metrics["grad_norm"])
    assert all(torch.equal(before[k], v) for k, v in params(model).items())
    assert not learner.update.optimizer.state  # no moment holds the overflow
    poison.remove()
    metrics = learner.step(trajs)
    assert metrics["skipped_steps"] == 0 and metrics["skipped_steps_total"] == 1
    assert all(torch.isfinite(v).all() for v in params(model).values())
    assert any(not torch.equal(before[k], v) for k, v in params(model).items())


def test_gae_advantages_are_whitened_unless_switched_off():
    """As verl: GAE advantages have mean 0 and variance 1 over the batch's generated tokens;
    the value targets are the returns before whitening."""
    from agentgym.learner.advantages import masked_whiten
    from agentgym.learner.batch import collate

    model = tiny_model()
    batch = collate(make_groups(model))
    m = batch.loss_mask
    preps = {}
    for whiten in (True, False):
        estimator = AdvantageConfig(estimator="gae", gae_whiten=whiten)
        preps[whiten] = Learner(tiny_model(), config(advantage=estimator)).update.prepare(batch)
    raw, white = preps[False].advantages, preps[True].advantages
    assert raw[m > 0].std() > 0.1 and raw[m > 0].mean().abs() > 0.1  # the outcome rewards
    assert white[m > 0].mean().item() == pytest.approx(0.0, abs=1e-5)
    assert white[m > 0].std().item() == pytest.approx(1.0, abs=1e-3)
    assert torch.allclose(white, masked_whiten(raw, m), atol=1e-6)
    assert torch.equal(preps[True].returns, preps[False].returns)


def test_only_cut_offs_by_the_cap_drive_the_adaptive_horizon():
    """Episodes cut off by a full context or the env's own limit are not held back by the
    turn cap: they never raise it. Each cause has its own metric."""
    from dataclasses import replace

    schedule = HorizonConfig(
        schedule="adaptive", start=2, max_cap=5, window=2, raise_truncation=0.5,
        min_success_gain=-1.0,
    )  # fmt: skip
    caps = {}
    for cause in ("context", "env", "cap"):
        model = tiny_model()
        learner = Learner(model, config(horizon=schedule))
        trajs = [replace(t, truncation=cause) for t in make_groups(model, cap=2)]
        for _ in range(2):
            metrics = learner.step(trajs)
        caps[cause] = learner.horizons[""].cap
        assert metrics["truncated/all"] == 1.0 and metrics[f"truncated_{cause}/all"] == 1.0
        others = {"cap", "context", "env"} - {cause}
        assert all(metrics[f"truncated_{c}/babyai"] == 0.0 for c in others)
    assert caps == {"context": 2, "env": 2, "cap": 3}


def test_each_update_gives_the_freed_heap_back(monkeypatch):
    """A CPU update frees gigabytes of activations; the learner trims the heap after each one
    (on every rank: the STEP command's handler runs on torchrun's followers too)."""
    import agentgym.learner.learner as learner_module

    calls = []
    monkeypatch.setattr(learner_module, "trim_heap", lambda: calls.append(1) or True)
    model = tiny_model()
    learner = Learner(model, config(groups_per_step=1))
    learner.ingest(make_groups(model, num_groups=1, seed=1))
    assert learner.train_ready() is not None
    assert calls == [1]


def test_activation_checkpointing_saves_less_and_takes_the_same_update():
    """Recomputing activations in the backward pass changes memory, not the update. The
    learner's model is in eval mode, where Hugging Face would not checkpoint at all: the
    checkpointed layers must really hold fewer tensors for the backward pass, and their dropout
    stays off."""
    trained, saved_numel = [], []
    for checkpointing in (False, True):
        model = tiny_model()
        learner = Learner(model, config(activation_checkpointing=checkpointing))
        assert not model.model.layers[0].self_attn.training
        saved = []

        def pack(t, saved=saved):
            saved.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            learner.step(make_groups(model, num_groups=2, seed=3))
        trained.append(params(learner.model))
        saved_numel.append(sum(saved))
    assert saved_numel[1] < 0.7 * saved_numel[0]
    plain, recomputed = trained
    start = params(tiny_model())
    assert any(not torch.equal(plain[name], start[name]) for name in start)
    assert plain.keys() == recomputed.keys()
    for name in plain:
        torch.testing.assert_close(recomputed[name], plain[name], rtol=0, atol=1e-6)


def flat(trajs):
    """The same episodes with every reward equal: no group has a learning signal."""
    from dataclasses import replace

    return [replace(t, reward=0.5) for t in trajs]


def test_a_step_without_signal_leaves_the_weights_where_they_were():
    """After an informative step AdamW holds momentum, and a step on a zero gradient would
    still move every weight by it: a step whose advantages are all 0 is skipped and counted."""
    model = tiny_model()
    learner = Learner(model, config())
    learner.step(make_groups(model, seed=1))
    before = params(model)
    metrics = learner.step(flat(make_groups(model, seed=2)))
    assert metrics["skipped_flat_steps"] == 1 and metrics["skipped_flat_steps_total"] == 1
    assert learner.version == 2
    after = params(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # with an entropy bonus the gradient is not zero: the step is taken
    learner = Learner(tiny_model(), config(loss=LossConfig(entropy_coef=0.01)))
    assert learner.step(flat(make_groups(learner.model, seed=2)))["skipped_flat_steps"] == 0


def test_a_periodic_eval_leaves_activation_checkpointing_on(tmp_path):
    """The engine of a periodic eval samples from the learner's own model: it must leave the
    checkpointed layers as the learner set them (recomputing in the backward pass)."""
    import asyncio

    from agentgym.engines import SamplingParams
    from agentgym.engines.hf import HFEngine

    model = tiny_model()
    learner = Learner(model, config(activation_checkpointing=True))
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    assert layers and all(m.training for m in layers)

    async def sample():
        engine = HFEngine(model, stop_token_ids=[0], pad_token_id=0)  # shared, as eval does
        try:
            return await engine.generate([[3, 4, 5]], SamplingParams(max_new_tokens=3, seed=0))
        finally:
            await engine.close()

    asyncio.run(sample())
    assert all(m.training for m in layers)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.numel()) or t, lambda t: t
    ):
        learner.step(make_groups(model, num_groups=2, seed=3))
    plain = Learner(tiny_model(), config())
    saved_plain = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved_plain.append(t.numel()) or t, lambda t: t
    ):
        plain.step(make_groups(plain.model, num_groups=2, seed=3))
    assert sum(saved) < 0.7 * sum(saved_plain)


def test_the_caps_an_update_trained_are_logged_and_a_strict_schedule_keeps_them_pure():
    """stepwise [2, 4] every 1 with the actor one update ahead: the groups for updates 0 and
    1 both start at version 0 under cap 2, so update 1 (whose schedule says 4) trains cap-2
    episodes, and its metrics say so. Strict: that group is refused, the actor is told the
    cap of the update a new group will be trained at, and update 1 trains cap 4 alone."""
    from agentgym.horizon import HorizonConfig as H

    for strict in (False, True):
        horizon = H(schedule="stepwise", rounds=(2, 4), every=1, strict=strict)
        model = tiny_model()
        learner = Learner(model, config(groups_per_step=1, max_staleness=1, horizon=horizon))
        ahead = [make_groups(model, num_groups=1, seed=s, cap=2) for s in (1, 2)]
        assert learner.control().cap_plans == ({"": (4,)} if strict else {})
        learner.ingest(ahead[0])
        first = learner.train_ready()
        assert first["horizon_cap_data/2"] == 4 and first["horizon_cap_trained"] == 2
        learner.ingest(ahead[1])
        second = learner.train_ready()
        if not strict:
            assert second["horizon_cap_trained"] == 4 and second["horizon_cap_data/2"] == 4
            continue
        assert second is None and learner.buffer.stats.dropped_cap_mismatch == 4
        assert learner.control().cap_of("babyai", ahead=1) == 4
        learner.ingest(make_groups(model, num_groups=1, seed=3, cap=4))
        second = learner.train_ready()
        assert second["horizon_cap_data/4"] == 4 and "horizon_cap_data/2" not in second
        assert second["dropped_cap_mismatch_total"] == 4


def test_a_strict_schedule_must_be_known_in_advance():
    from agentgym.configtools import ConfigError

    with pytest.raises((ConfigError, ValueError), match="strict"):
        HorizonConfig(schedule="adaptive", strict=True)
