"""The actor: menu policy, one group, env failures, and the loop against a fake learner (ZMQ)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from agentgym.actor.actor import Actor, ActorSettings, EnvDraw  # noqa: E402
from agentgym.actor.config import EpisodeRules  # noqa: E402
from agentgym.actor.episodes import EpisodeSpec, next_ids, run_group  # noqa: E402
from agentgym.actor.menu import MenuPolicy  # noqa: E402
from agentgym.actor.policy import make_engine, sampling_params  # noqa: E402
from agentgym.agent.turns import ChatCodec, Conversation  # noqa: E402
from agentgym.envs import EnvPool, StepBatch  # noqa: E402
from agentgym.learner.batch import collate  # noqa: E402
from agentgym.learner.forward import forward_tokens  # noqa: E402
from agentgym.transport.endpoints import Endpoints  # noqa: E402
from agentgym.transport.learner_channels import LearnerChannels  # noqa: E402
from agentgym.transport.weights.tensors import state_dict_to_blobs, write_safetensors  # noqa: E402
from agentgym.transport.wire import Control, decode_control, encode_control  # noqa: E402


def _rules(context: int) -> EpisodeRules:
    """The menu policy's rules: bare one-token replies, no system prompt."""
    return EpisodeRules(reply_format="bare", system_prompt=False, max_context_tokens=context)


def _group(config, model, tokenizer, pool, *, task_id=0, size=4, cap=2, group_id=7, context=1024):
    spec = EpisodeSpec("babyai", task_id, group_id, size, cap, _rules(context))
    engine = make_engine(config, model, tokenizer, seed=3)

    async def go():
        try:
            return await run_group(
                spec, engine, pool, ChatCodec(tokenizer), sampling_params(config), next_ids(0)
            )
        finally:
            await engine.close()

    return asyncio.run(go())


def test_menu_policy_puts_all_mass_on_listed_actions(menu_run):
    config, model, tokenizer = menu_run
    assert isinstance(model, MenuPolicy)
    pool = EnvPool("babyai")
    sid = pool.create(1)
    (obs,) = pool.reset(sid, [1])
    menu = pool.available_actions(sid)[0]
    conv = Conversation(ChatCodec(tokenizer), [{"role": "user", "content": obs}])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([conv.tokens])).logits[0, -1]
    probs = logits.softmax(-1)
    top = {tokenizer.decode([int(i)]) for i in torch.nonzero(probs > 1e-6)[:, 0]}
    assert top == set(menu) - {a for a in menu if tokenizer.convert_tokens_to_ids(a) is None}
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-5)


def test_group_trajectories_share_task_cap_and_match_learner_logprobs(menu_run):
    config, model, tokenizer = menu_run
    result = _group(config, model, tokenizer, EnvPool("babyai"), size=4, cap=2)
    assert result.errors == []
    trajs = result.trajectories
    assert len(trajs) == 4
    assert {(t.group_id, t.group_size, t.task_id, t.horizon_cap) for t in trajs} == {(7, 4, 0, 2)}
    for t in trajs:
        assert 1 <= t.num_turns <= 2
        assert int(t.loss_mask.sum()) == t.num_turns  # one token per reply
        assert t.truncated == (not t.success and t.num_turns == 2)
        assert t.truncation in (("cap", "context") if t.truncated else ("",))
        assert t.turn_versions.tolist() == [0] * t.num_turns
    # the learner's log-probs through the same model equal the behaviour log-probs
    batch = collate(trajs, tokenizer.pad_token_id)
    with torch.no_grad():
        logp = forward_tokens(model, batch, 1.0).logp
    mask = batch.loss_mask.bool()
    assert torch.allclose(logp[mask], batch.behav_logp[mask], atol=1e-4)


def test_at_another_temperature_the_learner_sees_the_behaviour_policy(menu_run):
    """A run config at T = 0.7 (engine and learner; ``load_config`` makes them agree): the
    actor's engine samples with the config's sampling params and a learner built from the same
    config sees importance weights of exactly 1 on those episodes (its log-probs are the
    engine's, at 0.7); at T = 1 it would not."""
    import copy

    from agentgym.learner import Learner

    config, model, tokenizer = menu_run
    model = copy.deepcopy(model)
    with torch.no_grad():  # peaked choices among the listed actions: the temperature matters
        model.lm.model.norm.weight.mul_(6.0)
    hot = replace(
        config,
        engine=replace(config.engine, temperature=0.7),
        learner=replace(config.learner, temperature=0.7),
    )
    pool = EnvPool("babyai")

    async def play():
        engine = make_engine(hot, model, tokenizer, seed=3)
        specs = [EpisodeSpec("babyai", task, g, 4, 3, _rules(1024), seed=g)
                 for g, task in ((1, 0), (2, 41))]  # fmt: skip
        try:
            return await asyncio.gather(
                *(run_group(s, engine, pool, ChatCodec(tokenizer), sampling_params(hot),
                            next_ids(0)) for s in specs)
            )  # fmt: skip
        finally:
            await engine.close()

    trajectories = [t for r in asyncio.run(play()) for t in r.trajectories]
    assert len(trajectories) == 8

    def first_update(learner_config):
        learner = Learner(copy.deepcopy(model), replace(learner_config, minibatches=2))
        return learner.step(trajectories)

    same = first_update(hot.learner)
    assert same["is_weight_mean"] == pytest.approx(1.0, abs=1e-4), same
    assert same["is_weight_max"] == pytest.approx(1.0, abs=1e-4), same
    at_one = first_update(config.learner)
    assert config.learner.temperature == 1.0
    # weights average about 1 either way (E_mu[pi / mu] = 1): their spread tells
    assert at_one["is_weight_ess"] < 0.995 and same["is_weight_ess"] > 0.9999, (same, at_one)


def test_seeded_group_gives_the_same_episodes_whatever_else_is_in_flight(menu_run):
    """The engine's own seed stream is handed out in request order, which depends on timing;
    a seeded group samples turn t with derive_seed(seed, t) instead."""
    config, model, tokenizer = menu_run
    pool = EnvPool("babyai")
    params = sampling_params(config)

    def spec(task_id, group_id, seed):
        return EpisodeSpec("babyai", task_id, group_id, 6, 3, _rules(1024), seed=seed)

    async def play(specs, engine_seed):
        engine = make_engine(config, model, tokenizer, seed=engine_seed)
        try:
            results = await asyncio.gather(
                *(
                    run_group(s, engine, pool, ChatCodec(tokenizer), params, next_ids(0))
                    for s in specs
                )
            )
        finally:
            await engine.close()
        return [[t.tokens.tolist() for t in r.trajectories] for r in results]

    alone = asyncio.run(play([spec(0, 1, 11)], engine_seed=1))[0]
    crowded = asyncio.run(play([spec(5, 2, 12), spec(0, 1, 11), spec(3, 3, 13)], engine_seed=2))
    assert crowded[1] == alone
    other_seed = asyncio.run(play([spec(0, 1, 99)], engine_seed=1))[0]
    assert other_seed != alone


class FlakyPool(EnvPool):
    """An EnvPool whose second session fails on its first step."""

    def step(self, ids, actions):
        b = super().step(ids, actions)
        bad = min(self.ids())
        errors = [
            ("env crashed" if i == bad + 1 else e) for i, e in zip(ids, b.errors, strict=True)
        ]
        return StepBatch(b.observations, b.rewards, b.dones, b.truncated, errors)


class OutOfStepsPool(EnvPool):
    """An EnvPool whose env ends every episode at its own step limit on the first step."""

    def step(self, ids, actions):
        b = super().step(ids, actions)
        return StepBatch(b.observations, b.rewards, b.dones, b.dones | True, b.errors)


def test_each_cut_off_names_its_cause(menu_run):
    """The turn cap, a full context and the env's own limit are told apart: only the first is
    what a higher cap lifts (the adaptive horizon reads it alone)."""
    config, model, tokenizer = menu_run
    pool = EnvPool("babyai")
    (opening,) = pool.reset(pool.create(1), [0])
    prompt = len(Conversation(ChatCodec(tokenizer), [{"role": "user", "content": opening}]).tokens)
    # the context fills after the first turn, on the turn the cap is also reached
    both = _group(config, model, tokenizer, pool, size=4, cap=1, context=prompt + 1)
    capped = _group(config, model, tokenizer, pool, size=4, cap=1)
    by_env = _group(config, model, tokenizer, OutOfStepsPool("babyai"), size=4, cap=5)
    for result, cause in ((both, "context"), (capped, "cap"), (by_env, "env")):
        unfinished = [t for t in result.trajectories if not t.success]
        assert unfinished and {t.truncation for t in unfinished} == {cause}
        assert all(t.truncated for t in unfinished)


def test_failing_env_session_drops_only_its_trajectory(menu_run):
    config, model, tokenizer = menu_run
    result = _group(config, model, tokenizer, FlakyPool("babyai"), size=4, cap=3)
    assert len(result.errors) == 1 and "env crashed" in result.errors[0]
    assert len(result.trajectories) == 3
    assert {t.group_size for t in result.trajectories} == {3}


class FakeLearner:
    """LearnerChannels driven by hand: publish versions, caps and weights; collect groups."""

    def __init__(self, tmp_path, model, chunk_bytes=64 << 20, files=False):
        self.channels = LearnerChannels(
            Endpoints.ipc(tmp_path), republish_s=0.1, chunk_bytes=chunk_bytes
        )
        self.files = tmp_path / "weight_files" if files else None
        self.model = model
        self.groups: dict[int, list] = {}

    def publish(self, version, cap, *, stop=False):
        state = self.model.state_dict()
        if self.files is not None:
            self.files.mkdir(exist_ok=True)
            path = self.files / f"v{version}.safetensors"
            header = [(k, v.dtype, tuple(v.shape)) for k, v in state.items()]
            write_safetensors(path, header, state.values())
            self.channels.publish_weights_file(version, str(path))
        else:
            self.channels.publish_weights(version, state_dict_to_blobs(state))
        self.channels.publish_control(Control(version, {"": cap}, stop=stop))

    def collect(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for t in self.channels.recv_trajectories(timeout_s=0.05):
                self.groups.setdefault(t.group_id, []).append(t)
        return self.groups


@pytest.mark.parametrize("how", ["whole", "streamed", "file"])
def test_actor_follows_fake_learner_and_stops_admitting(menu_run, tmp_path, how):
    """The actor follows versions and caps; its engine ends with the learner's weights, either
    fetched whole, streamed in 16 KB chunks (tensors larger than that in pieces), or read from
    the safetensors file the learner names (whole: into an engine that does not stream)."""
    config, model, tokenizer = menu_run
    learner_model = replace_model_copy(model)
    chunk = 16 << 10 if how == "streamed" else 64 << 20
    fake = FakeLearner(tmp_path, learner_model, chunk_bytes=chunk, files=how == "file")
    settings = ActorSettings(
        draws=(EnvDraw("babyai", (0, 1, 40, 41)),),
        group_size=3,
        groups_in_flight=3,
        max_staleness=0,
        share=1,
        rules=_rules(1024),
    )
    engine_model = replace_model_copy(model)
    engine = make_engine(config, engine_model, tokenizer)
    engine.streams_weights = how != "whole"
    actor = Actor(
        settings,
        engine,
        EnvPool("babyai"),
        ChatCodec(tokenizer),
        sampling_params(config),
        fake.channels.endpoints,
    )
    out = {}
    thread = threading.Thread(
        target=lambda: out.update(stats=asyncio.run(actor.run(timeout_s=120)))
    )
    try:
        fake.publish(0, 2)
        thread.start()
        groups = fake.collect(6.0)
        # staleness 0 and share 1: one group at version 0, then admission stops
        assert len(groups) == 1
        (first,) = groups.values()
        assert len(first) == 3 and {t.horizon_cap for t in first} == {2}
        assert {v for t in first for v in t.turn_versions.tolist()} == {0}
        with torch.no_grad():
            for p in learner_model.parameters():
                p.add_(0.01)
        fake.publish(1, 3)
        groups = fake.collect(6.0)
        assert len(groups) == 2
        second = [g for g in groups.values() if g is not first][0]
        assert {t.horizon_cap for t in second} == {3}
        assert {v for t in second for v in t.turn_versions.tolist()} == {1}
        for name, value in learner_model.state_dict().items():
            assert torch.equal(engine_model.state_dict()[name], value), name
        fake.publish(1, 3, stop=True)
        thread.join(30)
        assert not thread.is_alive()
    finally:
        actor.stop()
        thread.join(30)
        fake.channels.close()
    stats = out["stats"]
    assert stats.groups_pushed == 2 and stats.weight_loads == 1
    assert stats.dropped_env_errors == 0


class FailingFirstGroupPool(EnvPool):
    """An EnvPool whose every session fails on the first step of the first group."""

    def step(self, ids, actions):
        b = super().step(ids, actions)
        if min(ids) >= self.failed_below:
            return b
        return StepBatch(b.observations, b.rewards, b.dones, b.truncated, ["crashed"] * len(ids))

    def create(self, n):
        ids = super().create(n)
        self.failed_below = getattr(self, "failed_below", None) or max(ids) + 1
        return ids


def _follower(config, model, tokenizer, fake, pool, **settings):
    """An actor of the tiny menu policy on ``pool``, following ``fake``, and its thread."""
    base = dict(draws=(EnvDraw("babyai", (0, 1, 40, 41)),), group_size=3, groups_in_flight=3,
                max_staleness=0, share=1, rules=_rules(1024))  # fmt: skip
    actor = Actor(
        ActorSettings(**{**base, **settings}),
        make_engine(config, replace_model_copy(model), tokenizer),
        pool,
        ChatCodec(tokenizer),
        sampling_params(config),
        fake.channels.endpoints,
    )
    out = {}
    thread = threading.Thread(target=lambda: out.update(stats=asyncio.run(actor.run(timeout_s=60))))
    return actor, thread, out


def test_a_synchronous_actor_replaces_a_group_whose_every_episode_failed(menu_run, tmp_path):
    """Nothing of such a group reaches the learner: without a replacement the synchronous
    run would wait for it for ever."""
    config, model, tokenizer = menu_run
    fake = FakeLearner(tmp_path, replace_model_copy(model))
    actor, thread, out = _follower(config, model, tokenizer, fake, FailingFirstGroupPool("babyai"))
    try:
        fake.publish(0, 2)
        thread.start()
        groups = fake.collect(8.0)
        assert len(groups) == 1 and {v for g in groups.values() for t in g
                                     for v in t.turn_versions.tolist()} == {0}  # fmt: skip
    finally:
        actor.stop()
        thread.join(30)
        fake.channels.close()
    assert out["stats"].groups_lost == 1 and out["stats"].dropped_env_errors == 3


class DeadEngine:
    """An engine that fails every call, as vLLM's does once its engine process died."""

    streams_weights = False  # never loads weights

    def __init__(self, engine):
        self.version = engine.version
        self._engine = engine

    async def generate(self, prompts, params):
        raise RuntimeError("EngineCore encountered an issue")

    async def close(self):
        await self._engine.close()


def test_a_group_that_raises_stops_the_actor_with_an_error(menu_run, tmp_path):
    """Its process must exit non-zero (the launcher lets an actor leave with 0), so the run
    stops instead of the learner waiting for groups for ever."""
    from agentgym.actor.actor import GroupFailed

    config, model, tokenizer = menu_run
    fake = FakeLearner(tmp_path, replace_model_copy(model))
    actor, _, out = _follower(config, model, tokenizer, fake, EnvPool("babyai"))
    actor.engine = DeadEngine(actor.engine)

    def run():
        try:
            asyncio.run(actor.run(timeout_s=60))
        except GroupFailed as e:
            out["error"] = e

    thread = threading.Thread(target=run)
    try:
        fake.publish(0, 2)
        thread.start()
        thread.join(30)
    finally:
        actor.stop()
        thread.join(30)
        fake.channels.close()
    assert "EngineCore encountered an issue" in str(out["error"])
    assert isinstance(out["error"].__cause__, RuntimeError)


def test_empty_weight_fetches_back_off(menu_run, tmp_path):
    """Between weight publications (every n updates) the learner's version runs ahead of the
    newest weights: the actor waits longer after each fetch that finds nothing newer instead
    of asking again at once."""
    config, model, tokenizer = menu_run
    fake = FakeLearner(tmp_path, replace_model_copy(model))
    actor, thread, out = _follower(config, model, tokenizer, fake, EnvPool("babyai"),
                                   max_staleness=2)  # fmt: skip
    try:
        fake.publish(0, 2)
        fake.channels.publish_control(Control(1, {"": 2}))  # version 1, weights still those of 0
        thread.start()
        fake.collect(1.0)
        before = fake.channels.weight_stats.received
        fake.collect(2.0)
        asked = fake.channels.weight_stats.received - before
    finally:
        actor.stop()
        thread.join(30)
        fake.channels.close()
    assert 1 <= asked <= 8  # waits of 0.05 s, 0.1 s, ... 1 s
    assert out["stats"].empty_weight_fetches >= 4 and out["stats"].weight_loads == 0


def test_admission_credits_groups_that_never_reach_training():
    """A group that was lost (nothing pushed) or that the learner dropped as too stale
    (``Control.dropped_groups``, per actor process) frees its place in the look-ahead."""

    class Engine:
        version = 0
        streams_weights = False  # never loads weights

    settings = ActorSettings((EnvDraw("babyai", (0,)),), max_staleness=0, share=1, index=3)
    actor = Actor(settings, Engine(), None, None, None, Endpoints())
    actor._start_launch(2)
    actor._take_control(Control(0, {"": 2}))
    actor._groups_finished = actor.stats.groups_started = 1
    assert not actor._may_admit()  # the synchronous budget: one group per version
    actor.stats.groups_lost = 1
    assert actor._may_admit()
    actor.stats.groups_started = 2
    assert not actor._may_admit()
    dropped = {(3, 1): 5, (3, 2): 1, (4, 2): 7}  # another launch, another index
    actor._take_control(decode_control(encode_control(Control(0, {"": 2}, dropped_groups=dropped))))
    assert actor.stats.groups_dropped_stale == 1 and actor._may_admit()


def test_admission_fills_the_first_batch_before_more_groups():
    """Until a group finishes, only ``share`` groups run (the learner's first batch); after
    that the in-flight limit and the staleness budget apply."""

    class Engine:
        version = 0
        streams_weights = False  # never loads weights

    settings = ActorSettings(
        (EnvDraw("babyai", (0,)),), groups_in_flight=4, max_staleness=2, share=2
    )
    actor = Actor(settings, Engine(), None, None, None, Endpoints())
    actor._control, actor._first_version = Control(0, {"": 2}), 0
    admitted = []
    for _ in range(4):
        admitted.append(actor._may_admit())
        actor.stats.groups_started += admitted[-1]
    assert admitted == [True, True, False, False]
    actor._groups_finished = 1
    assert actor._may_admit()  # budget (0 - 0 + 2 + 1) * 2 = 6 groups at version 0
    actor.stats.groups_started = 6
    assert not actor._may_admit()


def test_a_relaunched_actor_goes_on_with_its_task_stream_under_new_ids():
    """Group k of an actor index draws its task and sampling seed from (seed, k) alone; a
    process starts at the position the learner names (``Control.task_streams``), so a
    relaunched one never repeats its predecessor's groups, and its launch number (the
    learner's ``Welcome``) moves its group and episode ids to a range of their own."""
    from agentgym.transport.ids import id_origin, id_position

    settings = ActorSettings((EnvDraw("babyai", tuple(range(1000))),), index=2, seed=5)

    def groups(actor, control, n):
        actor._control = control
        actor._start_stream(control.task_streams.get(2, 0))
        specs = []
        for _ in range(n):
            gid = next(actor._group_ids)
            rng = actor._stream_rng(gid)
            specs.append((id_origin(gid), id_position(gid), rng.choice(settings.draws[0].task_ids)))
        return specs

    first = Actor(settings, None, None, None, None, Endpoints())
    ran = groups(first, Control(0, {"": 2}), 20)
    assert [g[:2] for g in ran] == [((2, 0), k) for k in range(20)]
    assert len({g[2] for g in ran}) > 10  # the tasks differ from group to group
    relaunched = Actor(settings, None, None, None, None, Endpoints())
    relaunched._start_launch(1)
    after = groups(relaunched, Control(7, {"": 2}, task_streams={2: 12}), 8)
    assert [g[:2] for g in after] == [((2, 1), k) for k in range(12, 20)]
    assert [g[2] for g in after] == [g[2] for g in ran[12:]]  # the same stream, not repeated
    assert id_origin(next(relaunched._episode_ids)) == (2, 1)


def replace_model_copy(model):
    """An independent copy of a MenuPolicy (the actor's engine must not share the tensors)."""
    import copy

    return copy.deepcopy(model)


def test_settings_reject_empty_task_list(menu_run):
    config, model, tokenizer = menu_run
    settings = ActorSettings((EnvDraw("babyai", ()),))
    with pytest.raises(ValueError, match="no task ids"):
        Actor(settings, None, None, None, None, Endpoints())


class OneReplyEngine:
    """Answers every prompt at once with the same reply (``inventory``), whatever the env."""

    version = 0
    streams_weights = False  # never loads weights

    def __init__(self, tokenizer):
        self.reply = list(tokenizer.encode("inventory", add_special_tokens=False))

    async def generate(self, prompts, params):
        from agentgym.engines.base import Generation

        await asyncio.sleep(0)
        return [Generation(self.reply, [-0.5] * len(self.reply), "length") for _ in prompts]

    async def close(self):
        pass


def test_groups_of_a_two_env_actor_reach_the_learner_one_env_each(menu_run):
    """An actor drawing from BabyAI and TextCraft (the same task ids in both) runs real groups
    on real pools; after the learner's group buffer and collate, every group of the batch holds
    episodes of one env and one task, and each episode's text is its own env's."""
    from agentgym.learner.batch import GroupBuffer

    config, _, tokenizer = menu_run
    envs = ("babyai", "textcraft")
    settings = ActorSettings(
        tuple(EnvDraw(e, (0, 1, 2), 1.0, 6) for e in envs), group_size=3, rules=_rules(1024),
    )  # fmt: skip
    pools = {e: EnvPool(e) for e in envs}
    actor = Actor(settings, OneReplyEngine(tokenizer), pools, ChatCodec(tokenizer),
                  sampling_params(config), Endpoints())  # fmt: skip
    pushed = []

    async def push(trajectories):
        pushed.extend(trajectories)

    actor._push = push
    actor._control, actor._first_version = Control(0, {"": 2}), 0

    async def run_groups():
        for _ in range(10):
            actor._start_group()
        await asyncio.gather(*actor._groups)

    asyncio.run(run_groups())
    assert len(pushed) == 30 and {t.env for t in pushed} == set(envs)
    buffer = GroupBuffer(max_staleness=0)
    buffer.add(reversed(pushed))
    batch_groups = buffer.pop_groups(10, version=0)
    assert batch_groups is not None and len(batch_groups) == 10
    trajectories = [t for g in batch_groups for t in g]
    batch = collate(trajectories)
    marks = {"babyai": "Your goal:", "textcraft": "Crafting commands:"}
    for g in range(10):
        index = batch.group_index.tolist()
        members = [t for t, i in zip(trajectories, index, strict=True) if i == g]
        assert len(members) == 3
        assert len({(t.env, t.task_id, t.horizon_cap) for t in members}) == 1, members
        for t in members:
            assert marks[t.env] in tokenizer.decode(t.tokens.tolist()[: t.prompt_len])
