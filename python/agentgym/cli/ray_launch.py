"""``agentgym train CONFIG --ray [ADDRESS]``: the run's processes placed on a Ray cluster.

Each learner rank and each actor runs in a small Ray actor (``ProcessHost``) that starts the
command the local launcher would (``python -m agentgym.cli.learner`` / ``agentgym.cli.actor``)
as a subprocess on the node Ray chose, its output in ``RUN_DIR/logs/<name>.log``. The
launcher (``agentgym.cli.train.Launcher``) watches, shows and stops these children exactly as
it does local ones: the learner first (it checkpoints), then the actors.

- Placement: the learner ranks take one placement group, one bundle per rank, packed onto as
  few nodes as possible and reserved all at once (GPU: 1 per rank when ``learner.device`` is
  cuda, else ``torch_threads`` CPUs). Each actor takes ``actor.torch_threads`` CPUs and one GPU
  when ``engine.device`` is cuda or the engine is vLLM.
- Ranks: with ``learner.ranks`` > 1 each rank gets torchrun's variables (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` = rank 0's node,
  ``MASTER_PORT`` = a free port there). Ray gives a GPU rank its own ``CUDA_VISIBLE_DEVICES``,
  so its local rank is 0.
- Sockets: rank 0 binds the actor channels over TCP on its node's address (the configured
  ``transport.base_port`` if the transport is tcp, else free ports) and writes them to
  ``RUN_DIR/endpoints.json``, which the actors read.
- Requirements: the run dir and the launcher's working directory are on a filesystem every node
  sees at the same path (children start in that directory, so relative paths in the config mean
  the same everywhere), and every node has the same Python environment with agentgym.
- Stop: Ctrl-C, SIGTERM or a failed child stops every child (SIGTERM, then SIGKILL after the
  grace period); the hosts are then killed and the placement group removed. A host that dies
  takes its process with it (``PR_SET_PDEATHSIG``), and Ray ends the hosts when the launcher's
  job ends, however it ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgym.cli.common import RESOLVED_CONFIG
from agentgym.cli.processes import START_TIMEOUT_S, Child, ChildDied, log_tail
from agentgym.cli.rundir import LOCK_ENV
from agentgym.config import RunConfig

PR_SET_PDEATHSIG = 1
LOST = -1  # exit code reported for a child whose host (or node) Ray lost


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise SystemExit("agentgym train --ray needs Ray: pip install 'agentgym-rs[ray]'") from e
    return ray


class ProcessHost:
    """The body of one Ray actor: runs one child command on the node Ray placed it on."""

    def __init__(self, log_path: str):
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    def node_ip(self) -> str:
        """This node's address as Ray knows it."""
        import ray

        return ray.util.get_node_ip_address()

    def free_port(self) -> int:
        """A TCP port free on this node now (for ``MASTER_PORT``)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def start(self, module: str, args: list[str], env: dict[str, str], cwd: str) -> str:
        """Start ``python -m module *args`` in ``cwd``; returns this node's address."""
        if not Path(cwd).is_dir():
            raise FileNotFoundError(
                f"{cwd} does not exist on {self.node_ip()}: agentgym train --ray needs the "
                "working directory and run dir on a filesystem every node sees"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
                cwd=cwd,
                start_new_session=True,  # signals reach it from this host only
                preexec_fn=_die_with_parent,
            )
        return self.node_ip()

    def poll(self) -> int | None:
        """The child's exit code, or None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def terminate(self) -> None:
        """SIGTERM the child if it runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the child, then kill it; its exit code."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def tail(self, lines: int) -> str:
        """The last ``lines`` lines of the child's log, read on its node."""
        return log_tail(self.log_path, lines)


_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    # runs in the child between fork and exec: libc was loaded before the fork, so this only
    # makes one system call
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class RayChild:
    """A child running in a ``ProcessHost`` Ray actor (``agentgym.cli.processes.Child``)."""

    def __init__(self, name: str, host: Any, log_path: Path):
        self.name, self.host, self.log_path = name, host, log_path
        self.code: int | None = None
        self.lost: str | None = None
        self._pending: Any = None  # an in-flight poll: polling never blocks the launcher

    def poll(self) -> int | None:
        if self.code is not None:
            return self.code
        ray = _import_ray()
        if self._pending is None:
            self._pending = self.host.poll.remote()
        ready, _ = ray.wait([self._pending], timeout=0)
        if not ready:
            return None
        ref, self._pending = self._pending, None
        try:
            self.code = ray.get(ref)
        except ray.exceptions.RayError as e:
            self.lost, self.code = f"Ray lost its host: {e}", LOST
        return self.code

    def terminate(self) -> None:
        if self.lost is None:
            self.host.terminate.remote()

    def wait(self, timeout_s: float) -> None:
        if self.lost is not None:
            return
        ray = _import_ray()
        try:
            ray.get(self.host.wait.remote(timeout_s), timeout=timeout_s + 30.0)
        except (ray.exceptions.RayError, TimeoutError) as e:
            self.lost = f"no answer from its host while stopping: {e}"

    def tail(self, lines: int = 15) -> str:
        text = log_tail(self.log_path, lines)  # the run dir is shared with the launcher
        return text if self.lost is None else f"{self.lost}\n{text}"


class RayProcesses:
    """Starts the run's processes on a Ray cluster (``agentgym.cli.processes.Processes``)."""

    def __init__(self, config: RunConfig, address: str = "auto"):
        ray = _import_ray()
        self.config = config
        self.run_dir = Path(config.run_dir).resolve()
        self.cwd = os.getcwd()
        self.hosts: list[Any] = []
        self.group: Any = None
        self.owns_connection = not ray.is_initialized()
        if self.owns_connection:
            try:
                ray.init(address=address, log_to_driver=False)
            except ConnectionError as e:
                raise SystemExit(
                    f"agentgym train --ray: no Ray cluster at {address!r} ({e}); "
                    "start one with `ray start --head`"
                ) from e
        self.host_class = ray.remote(ProcessHost)
        resources = ray.cluster_resources()
        print(
            f"agentgym train: Ray cluster with {resources.get('CPU', 0):g} CPU(s), "
            f"{resources.get('GPU', 0):g} GPU(s)",
            flush=True,
        )

    def start_learner(self, args: list[str], stopping: Callable[[], bool]) -> list[Child]:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ranks = self.config.learner.ranks
        bundle = learner_bundle(self.config)
        self.group = placement_group([bundle] * ranks, strategy="PACK")
        self._wait([self.group.ready()], f"{ranks} learner rank(s) of {bundle}", stopping)
        names = ["learner"] + [f"learner{r}" for r in range(1, ranks)]
        hosts = [
            self._host(
                name,
                {"num_cpus": bundle["CPU"], "num_gpus": bundle.get("GPU", 0)},
                PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=r),
            )
            for r, name in enumerate(names)
        ]
        ips = self._wait([h.node_ip.remote() for h in hosts], "the learner ranks", stopping)
        port = self._wait([hosts[0].free_port.remote()], "rank 0", stopping)[0]
        args = [*args, *self._transport_sets(ips[0])]
        # the launcher holds the run dir's lock for processes it cannot hand the descriptor to
        held = {LOCK_ENV: "held by the launcher"}
        envs = [
            {**(rank_env(r, ips, port, gpu="GPU" in bundle) if ranks > 1 else {}), **held}
            for r in range(ranks)
        ]
        starts = [
            h.start.remote("agentgym.cli.learner", args, env, self.cwd)
            for h, env in zip(hosts, envs, strict=True)
        ]
        self._wait(starts, "the learner ranks", stopping)
        self._say_where(names, ips)
        return [RayChild(n, h, self._log_path(n)) for n, h in zip(names, hosts, strict=True)]

    def start_actors(self, extras: list[list[str]], stopping: Callable[[], bool]) -> list[Child]:
        names = [f"actor{i}" for i in range(len(extras))]
        options = actor_options(self.config)
        hosts = [self._host(name, options, None) for name in names]
        config_path = str(self.run_dir / RESOLVED_CONFIG)
        starts = [
            h.start.remote("agentgym.cli.actor", [config_path, *extra], {}, self.cwd)
            for h, extra in zip(hosts, extras, strict=True)
        ]
        ips = self._wait(starts, f"{len(hosts)} actor(s) of {options}", stopping)
        self._say_where(names, ips)
        return [RayChild(n, h, self._log_path(n)) for n, h in zip(names, hosts, strict=True)]

    def close(self) -> None:
        ray = _import_ray()
        for host in self.hosts:
            ray.kill(host)
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.group)
        if self.owns_connection:
            ray.shutdown()

    def _host(self, name: str, options: dict[str, Any], strategy: Any) -> Any:
        host = self.host_class.options(
            **options, max_restarts=0, scheduling_strategy=strategy
        ).remote(str(self._log_path(name)))
        self.hosts.append(host)
        return host

    def _log_path(self, name: str) -> Path:
        return self.run_dir / "logs" / f"{name}.log"

    def _transport_sets(self, host: str) -> list[str]:
        t = self.config.transport
        port = t.base_port if t.kind == "tcp" else 0  # 0: free ports, read from endpoints.json
        sets = ["transport.kind=tcp", f"transport.host={host}", f"transport.base_port={port}"]
        return [arg for item in sets for arg in ("--set", item)]

    def _wait(self, refs: list[Any], what: str, stopping: Callable[[], bool]) -> list[Any]:
        """``ray.get(refs)``, but interruptible by a stop request and bounded in time; a
        cluster without room for ``what`` is an error that says so."""
        ray = _import_ray()
        started, told = time.monotonic(), False
        while True:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
            if len(done) == len(refs):
                try:
                    return ray.get(refs)
                except ray.exceptions.RayError as e:
                    raise ChildDied(f"Ray could not start {what}: {e}") from e
            waited = time.monotonic() - started
            if stopping():
                raise ChildDied(f"stopped while Ray was placing {what}")
            if waited > START_TIMEOUT_S:
                raise ChildDied(
                    f"Ray could not place {what} in {START_TIMEOUT_S:.0f}s: the cluster lacks "
                    "the resources (see `ray status`)"
                )
            if waited > 10.0 and not told:
                print(f"agentgym train: waiting for Ray to place {what}...", flush=True)
                told = True

    def _say_where(self, names: list[str], ips: list[str]) -> None:
        where = ", ".join(f"{n} on {ip}" for n, ip in zip(names, ips, strict=True))
        print(f"agentgym train: {where} (Ray)", flush=True)


def learner_bundle(config: RunConfig) -> dict[str, float]:
    """The resources one learner rank reserves: a GPU on cuda, else its torch threads."""
    bundle = {"CPU": float(max(config.torch_threads, 1))}
    if config.learner.device.startswith("cuda"):
        bundle["GPU"] = 1.0
    return bundle


def actor_options(config: RunConfig) -> dict[str, float]:
    """The resources one actor asks Ray for: its torch threads, and a GPU for a GPU engine."""
    gpu = config.engine.device.startswith("cuda") or config.engine.backend == "vllm"
    return {"num_cpus": float(max(config.actor.torch_threads, 1)), "num_gpus": float(gpu)}


def rank_env(rank: int, ips: list[str], port: int, *, gpu: bool) -> dict[str, str]:
    """What torchrun would set for ``rank`` of ``len(ips)`` ranks placed on nodes ``ips``.

    A GPU rank sees only the GPU Ray assigned it (``CUDA_VISIBLE_DEVICES``), so it is local
    rank 0 of 1; CPU ranks are numbered per node.
    """
    node = ips[rank]
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(len(ips)),
        "LOCAL_RANK": "0" if gpu else str(ips[:rank].count(node)),
        "LOCAL_WORLD_SIZE": "1" if gpu else str(ips.count(node)),
        "MASTER_ADDR": ips[0],
        "MASTER_PORT": str(port),
    }
