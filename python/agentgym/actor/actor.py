"""The actor loop: admit groups, run them concurrently, push them, follow the learner.

Three things run on one asyncio loop:

- the control listener: the learner's version and horizon cap; a newer version triggers one
  weight fetch at a time (episodes in flight keep going; each turn records the version that
  generated it);
- the admission loop: starts a new group (a task drawn from the actor's task list, the cap in
  force now) whenever all of these hold:
    * fewer than ``groups_in_flight`` groups are running;
    * the engine's weights are at most ``max_staleness`` versions behind the learner;
    * the actor has started fewer than ``(learner_version - first_version + max_staleness + 1)
      * share`` groups that the learner can still use, ``share`` being its part of the
      learner's ``groups_per_step``. This bounds how far sampling runs ahead of training.
      With ``max_staleness = 0`` (``--sync``) it is the synchronous loop: each actor samples
      its share with the newest weights, then waits for the update. Groups that never reach
      training are credited back, or the look-ahead would shrink with each of them for good
      (a synchronous run stalls on the first): a group whose every episode failed (nothing
      was pushed), and a group the learner dropped as too stale (``Control.dropped_groups``);
    * until its first group has finished, the actor runs no more than ``share`` groups: they
      make the learner's first batch, and on a busy engine more groups would share its batches
      and delay that batch (the learner would idle at start-up);
- the groups themselves (``run_group``), each pushed as one message when it finishes.

Each actor index has a task stream: its k-th group (k, the stream position, is the counter of
the group id) draws its env and task and seeds its sampling from ``(seed, k)`` alone. A process
starts at the position the learner names (``Control.task_streams``): one past the last group it
received from that index, so a relaunched actor never repeats its predecessor's groups, and in
a run resumed from a checkpoint one past the last group trained before it, so a resumed
deterministic run trains on the groups an uninterrupted one would.

The envs an actor draws from are one list (``ActorSettings.draws``; a single-env run is a list
of one). In a multi-env run each env has its own pool, task list and share of the in-flight
groups (by weight, at least one), so an env whose steps are slow (a remote
server) holds only its own slots and never starves the others. The next group's env is drawn
by weight among the envs with a free slot; its task from that env's list; its cap is the
learner's cap for that env. A group never mixes envs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgym.actor.config import EpisodeRules
from agentgym.actor.episodes import (
    Clocks,
    EpisodeSpec,
    GroupResult,
    derive_seed,
    next_ids,
    run_group,
)
from agentgym.agent.turns import ChatCodec
from agentgym.curriculum import CurriculumConfig, open_task_ids
from agentgym.engines.base import Engine, SamplingParams
from agentgym.envs import EnvPool
from agentgym.transport.actor_channels import AsyncActorChannels
from agentgym.transport.auth import TransportKeys
from agentgym.transport.endpoints import Endpoints
from agentgym.transport.ids import id_position
from agentgym.transport.weights import WeightFetchError
from agentgym.transport.wire import Control, Trajectory, trajectory_header

log = logging.getLogger(__name__)


class IncompatibleLearner(RuntimeError):
    """The learner refused this actor: it speaks another wire schema (agentgym version)."""


class GroupFailed(RuntimeError):
    """A group raised (its engine died, say): the actor stopped, and its process exits
    non-zero, so that the launcher stops the run instead of the learner waiting for groups
    that will not come."""


@dataclass(frozen=True)
class EnvDraw:
    """One env an actor draws groups of."""

    name: str
    task_ids: tuple[int, ...]
    weight: float = 1.0
    in_flight: int | None = None
    """Groups of this env that may run at once (None: as many as the actor runs,
    ``ActorSettings.groups_in_flight``)."""
    curriculum: CurriculumConfig | None = None
    """Its level stages: tasks are drawn from the levels the learner's stage opens."""


def in_flight_shares(weights: Sequence[float], total: int) -> list[int]:
    """``total`` in-flight slots split by weight (largest remainders), at least one each."""
    raw = [total * w / sum(weights) for w in weights]
    shares = [max(1, int(r)) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (int(raw[i]) - raw[i], i))
    for i in order[: max(0, total - sum(shares))]:
        shares[i] += 1
    return shares


@dataclass(frozen=True)
class ActorSettings:
    """Everything one actor process needs besides its engine, pool and codec."""

    draws: tuple[EnvDraw, ...]
    """The envs groups are drawn from, each with its task ids, weight, in-flight share and
    level curriculum (one for a single-env run)."""
    group_size: int = 8
    groups_in_flight: int = 4
    max_staleness: int = 4
    share: int = 1
    """Groups this actor contributes to each learner step."""
    index: int = 0
    rules: EpisodeRules = field(default_factory=EpisodeRules)
    """The rules of every episode (``ActorConfig.rules``); the worked example applies to the
    envs whose family has one."""
    seed: int = 0
    push_timeout_s: float = 2.0
    fetch_backoff_s: tuple[float, float] = (0.05, 1.0)
    """After a weight fetch that found nothing newer, the wait before the next one: the first,
    doubled after each further empty fetch up to the second (weights published every n
    updates leave the actor behind the learner's version between publications)."""
    sample_every: int = 0
    sample_path: str | None = None
    stats_path: str | None = None
    stats_every_s: float = 2.0
    name: str | None = None
    """How the learner knows this actor (None: host:pid:index)."""
    connect_timeout_s: float = 120.0
    """How long to wait at start for a learner to answer (it may start after the actor)."""
    hello_every_s: float = 5.0
    """How often the actor tells the learner it is alive."""

    def __post_init__(self) -> None:
        names = [d.name for d in self.draws]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"ActorSettings.draws: one entry per env, at least one: {names}")


@dataclass
class ActorStats:
    """Counters an actor reports (and writes to its stats file)."""

    groups_started: int = 0
    groups_pushed: int = 0
    groups_lost: int = 0
    """Groups none of whose episodes could be pushed (every env session failed)."""
    groups_dropped_stale: int = 0
    """Of the pushed groups, those the learner dropped as too stale (it says so)."""
    trajectories_pushed: int = 0
    dropped_env_errors: int = 0
    last_errors: list[str] = field(default_factory=list)
    generated_tokens: int = 0
    pushed_tokens: int = 0
    weight_loads: int = 0
    empty_weight_fetches: int = 0
    """Weight fetches that loaded nothing (nothing newer was published yet, or they failed)."""
    engine_version: int = 0
    learner_version: int = 0
    generate_busy_s: float = 0.0
    env_busy_s: float = 0.0
    push_s: float = 0.0
    weights_s: float = 0.0
    wall_s: float = 0.0
    waiting_admission_s: float = 0.0


class Actor:
    """One actor: an engine, an env pool and the channels to a learner (module docstring)."""

    def __init__(
        self,
        settings: ActorSettings,
        engine: Engine,
        pool: EnvPool | Mapping[str, EnvPool],
        codec: ChatCodec,
        params: SamplingParams,
        endpoints: Endpoints,
        *,
        keys: TransportKeys | None = None,
    ):
        empty = [d.name for d in settings.draws if not d.task_ids]
        if empty:
            raise ValueError(f"the actor has no task ids for env(s) {', '.join(empty)}")
        self.s = settings
        self.engine, self.codec, self.params = engine, codec, params
        self.pools = dict(pool) if isinstance(pool, Mapping) else {settings.draws[0].name: pool}
        self._running: Counter[str] = Counter()  # groups in flight per env
        self._open_ids: dict[tuple[str, int], list[int]] = {}  # (env, stage) -> open task ids
        self.endpoints = endpoints
        self.keys = keys
        self.stats = ActorStats()
        self.clocks = Clocks()
        self._start_launch(0)
        self._control: Control | None = None
        self._first_version: int | None = None
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None  # the one ``run`` runs on
        self._loop_thread: int | None = None
        self._failure: BaseException | None = None  # the first group's exception
        self._changed = asyncio.Event()
        self._version_moved = asyncio.Event()  # the learner's version went up
        self._groups: dict[asyncio.Task[None], str] = {}  # running groups and their envs
        self._fetching: asyncio.Task[None] | None = None
        self._groups_finished = 0
        self._samples = 0

    # --- entry point ------------------------------------------------------------------------

    async def run(
        self, *, max_groups: int | None = None, timeout_s: float | None = None
    ) -> ActorStats:
        """Run until the learner says stop (or ``max_groups`` groups were pushed, or timeout);
        raises `GroupFailed` after stopping when a group raised."""
        start = time.perf_counter()
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._channels = AsyncActorChannels(
            self.endpoints, actor=self.name, index=self.s.index, keys=self.keys
        )
        try:
            await self._greet()
        except BaseException:
            self._channels.close()
            await self.engine.close()
            raise
        tasks = [
            asyncio.create_task(self._listen()),
            asyncio.create_task(self._report()),
            asyncio.create_task(self._heartbeat()),
        ]
        try:
            await asyncio.wait_for(self._admit(max_groups), timeout_s)
        except TimeoutError:
            log.warning("actor %d: timed out after %.0f s", self.s.index, timeout_s)
        finally:
            self._stop.set()
            for t in [*tasks, *self._groups, *([self._fetching] if self._fetching else [])]:
                t.cancel()
            await asyncio.gather(*tasks, *self._groups, return_exceptions=True)
            self.stats.wall_s = time.perf_counter() - start
            self._write_stats()
            self._channels.close()
            await self.engine.close()
        if self._failure is not None:
            raise GroupFailed(f"actor {self.s.index}: a group failed: {self._failure!r}") from (
                self._failure
            )
        return self.stats

    @property
    def name(self) -> str:
        """This actor's name on the learner's side."""
        return self.s.name or f"{socket.gethostname()}:{os.getpid()}:{self.s.index}"

    async def _greet(self) -> None:
        """Say hello until a learner answers (up to ``connect_timeout_s``); an incompatible
        learner (another wire schema) is an error, before any work."""
        deadline = time.monotonic() + self.s.connect_timeout_s
        while True:
            welcome = await self._channels.hello(timeout_s=min(5.0, self.s.connect_timeout_s))
            if welcome is not None and not welcome.accepted:
                raise IncompatibleLearner(f"the learner refused this actor: {welcome.reason}")
            if welcome is not None:
                self._start_launch(welcome.launch)
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no learner answered at {self.endpoints.weights} within "
                    f"{self.s.connect_timeout_s:.0f} s"
                )
            log.info("actor %d: waiting for a learner at %s", self.s.index, self.endpoints.weights)

    def _start_launch(self, launch: int) -> None:
        """Ids of this process, the ``launch``-th with this actor's index: a relaunched (or
        resumed) actor never repeats a group or episode id of the processes before it. Its
        group ids take their counter from the task stream (``_start_stream``)."""
        self.launch = launch
        self._start_stream(0)
        self._episode_ids = next_ids(self.s.index, launch)

    def _start_stream(self, position: int) -> None:
        """Go on with this index's task stream from ``position`` (the next group's)."""
        self._group_ids = next_ids(self.s.index, self.launch, position)

    def _stream_rng(self, group_id: int) -> random.Random:
        """The draws of the group at ``group_id``'s stream position: a function of the
        actor's seed and that position alone."""
        return random.Random(derive_seed(self.s.seed, id_position(group_id), 1))

    async def _heartbeat(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.s.hello_every_s)
            welcome = await self._channels.hello(timeout_s=self.s.hello_every_s)
            if welcome is None:
                log.warning("actor %d: the learner did not answer a hello", self.s.index)

    def stop(self) -> None:
        """Ask the loop to finish (groups in flight are abandoned). Callable from any thread:
        from outside the running loop's thread the request is handed to that loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._stop_now)
        else:
            self._stop_now()

    def _stop_now(self) -> None:
        self._stop.set()
        self._changed.set()

    # --- admission --------------------------------------------------------------------------

    async def _admit(self, max_groups: int | None) -> None:
        while not self._stop.is_set():
            if max_groups is not None and self.stats.groups_pushed >= max_groups:
                return
            started = max_groups is None or self.stats.groups_started < max_groups
            if started and self._may_admit():
                self._start_group()
                continue
            waited = time.perf_counter()
            self._changed.clear()
            await _wait_event(self._changed, 0.5)
            self.stats.waiting_admission_s += time.perf_counter() - waited

    def _may_admit(self) -> bool:
        c = self._control
        if c is None or c.stop or self._first_version is None:
            return False
        if len(self._groups) >= self.s.groups_in_flight or not self._open_envs():
            return False
        if c.policy_version - self.engine.version > self.s.max_staleness:
            return False
        if self._groups_finished == 0 and self.stats.groups_started >= self.s.share:
            return False
        budget = (c.policy_version - self._first_version + self.s.max_staleness + 1) * self.s.share
        return self._groups_usable() < budget

    def _updates_ahead(self) -> int:
        """How many updates from now the group about to start is expected to be trained at:
        the learner trains ``share`` of this actor's groups per update, in turn (a strict
        horizon schedule gives it that update's cap)."""
        assert self._control is not None and self._first_version is not None
        target = self._first_version + self._groups_usable() // self.s.share
        return max(target - self._control.policy_version, 0)

    def _groups_usable(self) -> int:
        """Groups started that the learner can still train on: neither lost here (nothing
        pushed) nor dropped there as too stale."""
        s = self.stats
        return s.groups_started - s.groups_lost - s.groups_dropped_stale

    def _open_envs(self) -> list[EnvDraw]:
        """The envs with a free in-flight slot."""
        limit = self.s.groups_in_flight
        return [d for d in self.s.draws if self._running[d.name] < (d.in_flight or limit)]

    def _draw_env(self, rng: random.Random) -> EnvDraw:
        """The next group's env: by weight among those with room (no draw for one env)."""
        open_envs = self._open_envs()
        if len(self.s.draws) == 1:
            return open_envs[0]
        now = self._control.env_weights if self._control is not None else {}
        weights = [now.get(d.name, d.weight) for d in open_envs]
        return rng.choices(open_envs, weights=weights)[0]

    def _open_tasks(self, draw: EnvDraw) -> Sequence[int]:
        """``draw``'s task ids, only those of the levels open now where it has a curriculum."""
        if draw.curriculum is None:
            return draw.task_ids
        assert self._control is not None
        key = (draw.name, self._control.env_stages.get(draw.name, 0))
        if key not in self._open_ids:
            self._open_ids[key] = open_task_ids(draw.task_ids, draw.curriculum, key[1])
        return self._open_ids[key]

    def _start_group(self) -> None:
        assert self._control is not None
        group_id = next(self._group_ids)
        rng = self._stream_rng(group_id)
        draw = self._draw_env(rng)
        spec = EpisodeSpec(
            env=draw.name,
            task_id=rng.choice(self._open_tasks(draw)),
            group_id=group_id,
            group_size=self.s.group_size,
            horizon_cap=self._control.cap_of(draw.name, self._updates_ahead()),
            rules=self.s.rules.for_env(draw.name),
            seed=derive_seed(self.s.seed, id_position(group_id)),
        )
        self.stats.groups_started += 1
        self._running[spec.env] += 1
        task = asyncio.create_task(self._run_group(spec))
        self._groups[task] = spec.env
        task.add_done_callback(self._group_done)

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._running[self._groups.pop(task)] -= 1
        self._groups_finished += 1
        self._changed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("actor %d: group failed: %r", self.s.index, task.exception(),
                      exc_info=task.exception())  # fmt: skip
            self._failure = self._failure or task.exception()
            self._stop.set()

    async def _run_group(self, spec: EpisodeSpec) -> None:
        pool = self.pools[spec.env]
        result = await run_group(
            spec, self.engine, pool, self.codec, self.params, self._episode_ids, self.clocks
        )
        self._count(result)
        if result.trajectories:
            await self._push(result.trajectories)
        else:  # every episode failed: the learner must not wait for this group
            self.stats.groups_lost += 1
            self._changed.set()
            await self._report_lost(spec.group_id)

    async def _report_lost(self, group_id: int) -> None:
        """Tell the learner a group will never arrive (it trains groups in the order they
        started, and would wait for it)."""
        while not self._stop.is_set():
            if await self._channels.send_trajectories([], self.s.push_timeout_s, [group_id]):
                return

    def _count(self, result: GroupResult) -> None:
        self.stats.generated_tokens += result.generated_tokens
        if result.errors:
            self.stats.dropped_env_errors += len(result.errors)
            self.stats.last_errors = (self.stats.last_errors + result.errors)[-5:]
            log.warning(
                "actor %d: dropped %d episode(s): %s",
                self.s.index,
                len(result.errors),
                result.errors[0],
            )

    async def _push(self, trajectories: Sequence[Trajectory]) -> None:
        start = time.perf_counter()
        while not self._stop.is_set():
            if await self._channels.send_trajectories(trajectories, self.s.push_timeout_s):
                self.stats.groups_pushed += 1
                self.stats.trajectories_pushed += len(trajectories)
                self.stats.pushed_tokens += sum(t.num_tokens for t in trajectories)
                self._maybe_sample(trajectories)
                break
        self.stats.push_s += time.perf_counter() - start
        self._changed.set()

    # --- control and weights ----------------------------------------------------------------

    async def _listen(self) -> None:
        while not self._stop.is_set():
            control = await self._channels.poll_control(0.1)
            if control is None:
                continue
            self._take_control(control)
            if control.stop:
                self.stop()
                return
            if control.policy_version > self.engine.version and self._fetching is None:
                self._fetching = asyncio.create_task(self._fetch())
            self._changed.set()

    def _take_control(self, control: Control) -> None:
        """Follow the learner's ``control``: the first one starts the task stream where the
        learner says; each says how many of this process's groups were dropped as stale."""
        if self._first_version is None:
            self._first_version = control.policy_version
            self._start_stream(control.task_streams.get(self.s.index, 0))
        if self._control is None or control.policy_version > self._control.policy_version:
            self._version_moved.set()
        dropped = control.dropped_groups.get((self.s.index, self.launch), 0)
        self.stats.groups_dropped_stale = max(self.stats.groups_dropped_stale, dropped)
        self._control = control
        self.stats.learner_version = control.policy_version

    async def _fetch(self) -> None:
        """Fetch weights until the engine has the learner's version. A fetch that finds
        nothing newer (the learner publishes weights every n updates) or fails is followed
        by a wait, longer after each in a row (``fetch_backoff_s``), not by the next at once;
        a newer version from the learner ends the wait."""
        wait, longest = self.s.fetch_backoff_s
        try:
            while not self._stop.is_set():
                c = self._control
                if c is None or c.policy_version <= self.engine.version:
                    return
                self._version_moved.clear()
                if await self._fetch_once() is not None:
                    wait = self.s.fetch_backoff_s[0]
                    continue
                self.stats.empty_weight_fetches += 1
                await _wait_event(self._version_moved, wait)
                wait = min(2 * wait, longest)
        finally:
            self._fetching = None
            self._changed.set()

    async def _fetch_once(self) -> int | None:
        """One fetch; the version loaded, or None (nothing newer, or the fetch failed)."""
        # the weight paths convert with torch; the actor module imports without it
        from agentgym.transport.weights.paths import load_newer

        start = time.perf_counter()
        try:
            loaded = await load_newer(self.engine, self._channels)
        except WeightFetchError as e:
            log.warning("actor %d: %s", self.s.index, e)
            return None
        finally:
            self.stats.weights_s += time.perf_counter() - start
        if loaded is not None:
            self.stats.weight_loads += 1
            self.stats.engine_version = loaded
            self._changed.set()
        return loaded

    # --- reporting --------------------------------------------------------------------------

    async def _report(self) -> None:
        start = time.perf_counter()
        while not self._stop.is_set():
            await asyncio.sleep(self.s.stats_every_s)
            self.stats.wall_s = time.perf_counter() - start
            self._write_stats()

    def _write_stats(self) -> None:
        self.stats.generate_busy_s = self.clocks.generate.seconds
        self.stats.env_busy_s = self.clocks.env.seconds
        self.stats.engine_version = self.engine.version
        if self.s.stats_path is None:
            return
        path = Path(self.s.stats_path)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.stats)))
        tmp.replace(path)

    def _maybe_sample(self, trajectories: Sequence[Trajectory]) -> None:
        every, path = self.s.sample_every, self.s.sample_path
        self._samples += 1
        if not every or path is None or (self._samples - 1) % every:
            return
        with open(path, "a") as f:
            for t in trajectories:
                f.write(json.dumps(trajectory_record(t, self.codec)) + "\n")


async def _wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait until ``event`` is set or ``timeout_s`` passed. Not ``wait_for`` with ``except
    TimeoutError``: on Python 3.11 a cancellation of the caller that lands as that inner
    timeout fires comes back as TimeoutError and would be swallowed (the actor's own
    ``timeout_s`` then never stopped it)."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout_s)
    finally:
        waiter.cancel()


def trajectory_record(t: Trajectory, codec: ChatCodec) -> dict[str, Any]:
    """A JSON record of one trajectory: the text as the model saw it, its token ids and loss
    mask (the form ``agentgym sft``, ``agentgym pairs`` and ``agentgym dpo`` read) and the
    behaviour log-probs (0 off the mask; ``agentgym hub`` colours replies by them). Its
    header fields follow the wire schema (``trajectory_header``)."""
    return {
        **trajectory_header(t),
        "truncated": t.truncated,
        "versions": t.turn_versions.tolist(),
        "turn_finish": t.turn_finish.tolist(),
        "num_tokens": t.num_tokens,
        "text": codec.tokenizer.decode(t.tokens.tolist()),
        "generated": [
            codec.tokenizer.decode(t.tokens[i : i + 1].tolist())
            for i in range(t.num_tokens)
            if t.loss_mask[i]
        ][:64],
        "tokens": t.tokens.tolist(),
        "loss_mask": t.loss_mask.tolist(),
        "logprobs": [round(x, 4) for x in t.logprobs.tolist()],
    }
