"""The optimizer step that RL (``Learner``), SFT and DPO share: clip the global gradient norm,
step unless that norm is not finite, clear the gradients, count the steps skipped."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

log = logging.getLogger(__name__)


class OptimizerStep:
    """Calling it takes one optimizer step on the gradients accumulated so far.

    A gradient whose norm is not finite (an overflow somewhere in the step's batch) is
    dropped instead: the step is skipped and counted in ``skipped``, since one step of NaN
    would ruin every parameter and the optimizer's moments. ``global_norm`` turns this
    process's norm into the one every rank sees (under FSDP2, ``distributed.full_tensor``),
    so that all ranks skip together.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        clip: float | None,
        *,
        global_norm: Callable[[Tensor], Tensor] | None = None,
    ):
        self.optimizer = optimizer
        self.clip = clip
        """The global gradient norm is clipped to this; None: no clipping."""
        self.global_norm = global_norm
        self.skipped = 0
        """Steps skipped so far because the gradient norm was not finite."""

    def __call__(self) -> float:
        """Clip, step (or skip) and zero the gradients; returns the norm before clipping."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        clip = self.clip if self.clip is not None else float("inf")
        norm = nn.utils.clip_grad_norm_(params, clip)
        if self.global_norm is not None:
            norm = self.global_norm(norm)
        norm = float(norm)
        if math.isfinite(norm):
            self.optimizer.step()
        else:
            self.skipped += 1
            log.warning("gradient norm %s: optimizer step skipped (%d so far)", norm, self.skipped)
        self.optimizer.zero_grad(set_to_none=True)
        return norm
