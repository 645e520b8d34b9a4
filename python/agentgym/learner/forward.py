"""The policy's forward pass over a batch of token rows: per-token log-probs, entropies and
(with a value head) values, aligned with the tokens. The RL learner, SFT and DPO all run it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from agentgym.learner.batch import TrainBatch
from agentgym.learner.losses import token_logprobs
from agentgym.models import keeps_logits


class ValueHead(nn.Module):
    """A scalar value per position from the policy's last hidden state (for GAE)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        """float[B, T] values."""
        return self.proj(hidden.float()).squeeze(-1)


@dataclass(frozen=True)
class ForwardOut:
    """Per-token outputs of one forward pass, aligned with the tokens."""

    logp: Tensor
    entropy: Tensor
    values: Tensor | None


def forward_tokens(
    model: nn.Module,
    batch: TrainBatch,
    temperature: float,
    value_head: ValueHead | None = None,
    entropy_grad: bool = False,
) -> ForwardOut:
    """Log-probs (at ``temperature``) and entropies of ``batch``'s generated tokens (0 off the
    loss mask, where nothing reads them), and optional values at every token.

    Values at position t come from the hidden state at t-1, like the log-prob of token t: both
    describe the state in which token t was chosen.

    No attention mask is passed: batches are right-padded, so under the causal mask a real token
    never sees padding, and positions default to 0..T-1 as they are for unpadded rows. Outputs
    at real tokens are those of the masked call; the model can take its fused causal attention
    path instead of materialising a [B, T, T] mask. Padding positions are masked out later.
    """
    kwargs = {}
    positions = None
    if keeps_logits(model):  # logits only where a generated token is predicted, in any row
        positions = (batch.loss_mask[:, 1:] > 0).any(0).nonzero().squeeze(1)
        kwargs["logits_to_keep"] = positions
    out = model(
        input_ids=batch.tokens,
        output_hidden_states=value_head is not None,
        use_cache=False,
        **kwargs,
    )
    logp, entropy = token_logprobs(
        out.logits, batch.tokens, batch.loss_mask, temperature,
        positions=positions, entropy_grad=entropy_grad,
    )  # fmt: skip
    values = None
    if value_head is not None:
        values = nn.functional.pad(value_head(out.hidden_states[-1][:, :-1]), (1, 0))
    return ForwardOut(logp, entropy, values)
