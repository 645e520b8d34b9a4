"""The learner under ``torchrun``: process group, FSDP2 sharding and the collectives of an update.

A learner started by ``torchrun`` (``RANK``/``WORLD_SIZE`` in the environment) joins a process
group (NCCL on GPU, gloo on CPU) and shards its model with FSDP2 (``fully_shard``) over every
rank: parameters, gradients and optimizer state are split, each decoder block is its own unit.
Every rank holds the whole update's batch (rank 0 receives it and broadcasts it) and does its
share of the rows; losses are normalised by the whole minibatch's token and sequence counts and
gradients are summed over ranks (not averaged), so N ranks take the step one process would.

A process started without torchrun gets ``Dist()``: world size 1, no process group, no
sharding; every collective here is then a no-op and the learner runs as a plain process.

Rank 0 alone talks to the actors; the other ranks follow it (``Ranks``): rank 0 broadcasts
each ``Command`` before it runs the command's handler, and every other rank, waiting in
``Ranks.follow``, runs the same handler on the same argument, so the collectives inside it
line up.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dist:
    """This process's place in the learner's process group (``sharded`` False: one process)."""

    rank: int = 0
    world_size: int = 1
    sharded: bool = False
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        """Whether this rank owns the channels, metrics and checkpoint bookkeeping."""
        return self.rank == 0

    @property
    def grad_scale(self) -> float:
        """The factor each rank's loss is multiplied by before backward: FSDP averages the
        ranks' gradients, and the update needs their sum (losses use global counts)."""
        return float(self.world_size) if self.sharded else 1.0

    def all_sum_(self, t: Tensor) -> Tensor:
        """Sum ``t`` over ranks in place (``t`` itself when there is one process)."""
        return self._all_reduce_(t, dist.ReduceOp.SUM)

    def all_max_(self, t: Tensor) -> Tensor:
        """Element-wise max of ``t`` over ranks, in place."""
        return self._all_reduce_(t, dist.ReduceOp.MAX)

    def _all_reduce_(self, t: Tensor, op: Any) -> Tensor:
        """All-reduce ``t`` in place; a host tensor under NCCL (which reduces only GPU
        tensors) travels through the rank's GPU and back."""
        if not self.sharded or self.world_size == 1:
            return t
        device = self._collective_device
        if device is None or t.device == device:
            dist.all_reduce(t, op=op)
            return t
        on_device = t.to(device)
        dist.all_reduce(on_device, op=op)
        return t.copy_(on_device)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; the ranks are one trusted job)."""
        if not self.sharded or self.world_size == 1:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._collective_device)
        return box[0]

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.sharded and self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        """Leave the process group once every rank is done with it (a rank tearing it down
        while another still talks to it aborts that one)."""
        if self.sharded and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def exit(self, code: int = 0) -> None:
        """End this process after ``close``: under torchrun, flush output and leave without
        interpreter finalization. The gloo process group stays referenced by the sharded
        parameters' device mesh until then, and its worker threads torn down during
        finalization can abort the process (SIGABRT, "terminate called without an active
        exception") after all work is done. One process: a normal return."""
        if not self.sharded:
            return
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    @property
    def _collective_device(self) -> torch.device | None:
        return torch.device(self.device) if self.device.startswith("cuda") else None


class Command(enum.Enum):
    """What rank 0 has every rank do with it (the argument travels with it)."""

    STEP = "step"
    """One update on the trajectories given."""
    WEIGHTS = "weights"
    """Gather the policy's weights for publishing at the version given (``learner.publish``)."""
    CHECKPOINT = "checkpoint"
    """Write a checkpoint into the directory given (every rank writes its shards)."""
    WAIT = "wait"
    """Nothing: keeps the other ranks' broadcast from timing out while rank 0 waits for data."""
    STOP = "stop"
    """The run is over: the other ranks leave ``Ranks.follow``."""


Handler = Callable[[Any], Any]


class Ranks:
    """Rank 0's commands to the learner's other ranks, and the one table of their handlers.

    ``lead`` runs a command's handler here; under torchrun it first broadcasts the command, so
    that every other rank (in ``follow``) runs the same handler too. One process: ``lead`` is a
    plain call of the handler, nothing is sent.
    """

    def __init__(self, dist: Dist, handlers: Mapping[Command, Handler]):
        missing = set(Command) - {Command.WAIT, Command.STOP} - handlers.keys()
        if missing:
            raise ValueError(f"no handler for {sorted(c.name for c in missing)}")
        self.dist = dist
        self.handlers = {Command.WAIT: _nothing, Command.STOP: _nothing, **handlers}
        self.last_sent = time.monotonic()
        """When rank 0 last broadcast a command (``keep_alive``)."""

    def lead(self, command: Command, arg: Any = None) -> Any:
        """Run ``command`` here and, under torchrun, on every other rank (rank 0 decides)."""
        if self.dist.sharded:
            self.dist.broadcast((command, arg))
            self.last_sent = time.monotonic()
        return self.handlers[command](arg)

    def keep_alive(self, after_s: float) -> None:
        """Under torchrun, a ``WAIT`` when no command went out for ``after_s``: the other
        ranks wait in a collective, which times out after ``learner.dist_timeout_s``."""
        if self.dist.sharded and time.monotonic() - self.last_sent > after_s:
            self.lead(Command.WAIT)

    def follow(self) -> None:
        """Ranks other than 0: run rank 0's commands until it says ``STOP``."""
        while True:
            command, arg = self.dist.broadcast(None)
            if command is Command.STOP:
                return
            self.handlers[command](arg)


def _nothing(_: Any) -> None:
    return None


def from_environment(device: str = "cpu", timeout_s: float = 600.0) -> Dist:
    """Join torchrun's process group if this process was started by torchrun, else ``Dist()``.

    ``device`` "cuda" becomes ``cuda:<LOCAL_RANK>``; the backend is NCCL for CUDA and gloo
    otherwise. ``timeout_s`` bounds every collective, so a dead rank ends the run with an error
    instead of a hang.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return Dist(device=device)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if not dist.is_initialized():
        # NCCL is told the rank's GPU up front (else it guesses one from the global rank).
        bound = {"device_id": torch.device(device)} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **bound)
    log.info("rank %d of %d (%s, %s)", rank, world, backend, device)
    return Dist(rank=rank, world_size=world, sharded=True, device=device)


def shard(module: nn.Module, *, bf16: bool) -> nn.Module:
    """FSDP2-shard ``module`` in place: each block named in ``_no_split_modules`` (Hugging Face
    models list their decoder layer class there), then the root for the rest.

    bf16: parameters are cast to bfloat16 for compute, gradients reduced in float32 and the
    sharded master weights stay float32. FSDP averages gradients over ranks; the learner
    multiplies each rank's loss by the world size (``Dist.grad_scale``), so the result is the
    sum its globally normalised losses call for (a divide factor of 1 would need PREMUL_SUM,
    which gloo lacks).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # FSDP warns when a sharded module returns a view (logits sliced to the kept positions, a
    # squeezed value): an in-place op on it would skip the backward all-gather. The learner
    # applies none to model outputs, so the warning is noise here.
    warnings.filterwarnings("ignore", r"FSDP2-wrapped module .* returned a view", UserWarning)
    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if bf16 else None,
        reduce_dtype=torch.float32,
    )
    blocks = {  # a wrapper (the menu policy) holds the Hugging Face model that names them
        name for sub in module.modules() for name in (getattr(sub, "_no_split_modules", None) or ())
    }
    for sub in module.modules():
        if sub is not module and type(sub).__name__ in blocks:
            fully_shard(sub, mp_policy=policy)
    fully_shard(module, mp_policy=policy)
    return module


def full_tensor(t: Tensor) -> Tensor:
    """The whole tensor behind a (possibly) sharded one; a collective for DTensors."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def full_state_dict_items(module: nn.Module, keep: bool):
    """(name, whole CPU tensor) for ``module``'s state dict, gathered one tensor at a time.

    Every rank must iterate (each gather is a collective); only ranks with ``keep`` get the
    tensors (others get None), so at most one whole tensor is in flight per rank.
    """
    for name, t in module.state_dict().items():
        whole = full_tensor(t.detach())
        yield name, (whole.to("cpu", copy=True) if keep else None)
