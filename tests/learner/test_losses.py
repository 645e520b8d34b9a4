"""Losses: vanilla PPO when mu == pi_prox, IS truncation and masking, aggregation, KL."""

import math

import pytest

torch = pytest.importorskip("torch")

from agentgym.learner import losses as L  # noqa: E402
from agentgym.learner.config import LossConfig  # noqa: E402


def loss_cfg(**kw) -> LossConfig:
    """The loss settings as the learner passes them: token-mean unless given."""
    return LossConfig(**{"aggregation": "token-mean", **kw})


def vanilla_ppo(logp, old_logp, adv, mask, eps):
    ratio = torch.exp(logp - old_logp)
    obj = torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)
    return -(obj * mask).sum() / mask.sum()


def random_case(seed=0, B=3, T=7):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 2
    prox = logp + 0.4 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, T, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    return logp, prox, adv, mask


def test_equals_vanilla_ppo_when_behaviour_is_prox():
    logp, prox, adv, mask = random_case()
    logp.requires_grad_(True)
    for mode in ("token", "sequence", "mask", "none"):
        cfg = loss_cfg(clip_eps=0.2, behaviour_weight=mode)
        out = L.policy_loss(logp, prox, prox, adv, mask, cfg)
        ref = vanilla_ppo(logp, prox, adv, mask, 0.2)
        assert out.loss.item() == pytest.approx(ref.item(), rel=1e-6)
        (g1,) = torch.autograd.grad(out.loss, logp)
        (g2,) = torch.autograd.grad(ref, logp)
        assert torch.allclose(g1, g2)
        assert out.weight_mean.item() == 1.0 and out.weight_ess.item() == pytest.approx(1.0)
    assert 0 < out.clip_fraction.item() < 1


def test_asymmetric_and_dual_clip():
    logp = torch.log(torch.tensor([[1.5, 0.5, 5.0]]))
    prox = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    cfg = loss_cfg(clip_eps=0.2, clip_eps_high=0.3, behaviour_weight="none")
    per = L.policy_loss(logp, prox, prox, adv, mask, cfg).loss * 3
    # token 0: min(1.5, 1.3) -> -1.3; token 1: min(0.5, 0.8) -> -0.5; token 2: -min(-5, -1.3) = 5
    assert per.item() == pytest.approx(-1.3 - 0.5 + 5.0)
    dual = loss_cfg(clip_eps=0.2, clip_eps_high=0.3, dual_clip=3.0, behaviour_weight="none")
    out = L.policy_loss(logp, prox, prox, adv, mask, dual)
    assert (out.loss * 3).item() == pytest.approx(-1.3 - 0.5 + 3.0)
    assert out.dual_clip_fraction.item() == pytest.approx(1 / 3)


def test_token_weights_are_truncated_at_cap():
    prox = torch.log(torch.tensor([[0.5, 0.9, 0.3]]))
    behav = torch.log(torch.tensor([[0.1, 0.9, 0.6]]))  # w = 5, 1, 0.5
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    w = L.behaviour_weights(prox, behav, mask, "token", cap=2.0)
    assert w[0].tolist() == pytest.approx([2.0, 1.0, 0.5])
    rejected = L.behaviour_weights(prox, behav, mask, "mask", cap=2.0)
    assert rejected[0].tolist() == pytest.approx([0.0, 1.0, 0.5])
    seq = L.behaviour_weights(prox, behav, mask, "sequence", cap=2.0)
    geo = (5.0 * 1.0 * 0.5) ** (1 / 3)
    assert seq[0].tolist() == pytest.approx([geo] * 3)
    masked = L.behaviour_weights(prox, behav, torch.tensor([[0.0, 1.0, 1.0]]), "sequence", 9.0)
    assert masked[0].tolist() == pytest.approx([0.0, 0.5**0.5, 0.5**0.5])


def test_weights_scale_each_tokens_loss():
    logp = torch.zeros(1, 2)
    prox = torch.zeros(1, 2)
    behav = torch.log(torch.tensor([[0.25, 2.0]]))  # w = 4 (capped to 3), 0.5
    adv = torch.tensor([[1.0, 1.0]])
    cfg = loss_cfg(behaviour_weight="token", behaviour_cap=3.0)
    out = L.policy_loss(logp, prox, behav, adv, torch.ones(1, 2), cfg)
    assert out.loss.item() == pytest.approx(-(3.0 + 0.5) / 2)
    assert out.weight_max.item() == pytest.approx(3.0)
    assert out.weight_ess.item() == pytest.approx(3.5**2 / (9.25 * 2))


def test_aggregation_modes():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert L.aggregate(x, m, "token-mean").item() == pytest.approx(10 / 4)
    assert L.aggregate(x, m, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert L.aggregate(x, m, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    with pytest.raises(ValueError, match="aggregation"):
        L.aggregate(x, m, "mean")


def test_microbatch_losses_add_up_with_global_counts():
    logp, prox, adv, mask = random_case(1, B=4)
    for mode in L.AGGREGATIONS:
        cfg = loss_cfg(aggregation=mode, norm_tokens=50.0)
        whole = L.policy_loss(logp, prox, prox, adv, mask, cfg).loss
        n_tok, n_seq = mask.sum(), (mask.sum(-1) > 0).sum()
        parts = sum(
            L.policy_loss(
                logp[i : i + 2],
                prox[i : i + 2],
                prox[i : i + 2],
                adv[i : i + 2],
                mask[i : i + 2],
                cfg,
                num_tokens=n_tok,
                num_seqs=n_seq,
            ).loss
            for i in (0, 2)
        )
        assert parts.item() == pytest.approx(whole.item(), rel=1e-6)


def test_kl_estimators():
    logp = torch.log(torch.tensor([0.5, 0.2]))
    ref = torch.log(torch.tensor([0.25, 0.2]))
    assert L.kl_estimate(logp, ref, "k1").tolist() == pytest.approx([0.6931472, 0.0])
    k3 = L.kl_estimate(logp, ref, "k3")
    assert k3.tolist() == pytest.approx([0.5 - 0.6931472 * -1 - 1 - 0.0 + 0.0, 0.0], abs=1e-6)
    assert (k3 >= 0).all()


def test_a_log_ratio_drift_past_float32_range_keeps_the_loss_finite():
    """A token whose log-prob moved ~90 nats within an update overflows exp in float32; the
    log-ratio is clamped first (as verl does), so the loss and its gradient stay finite, and
    the clipped objective is unchanged where it was finite."""
    logp = torch.tensor([[0.0, -0.1, -1.0]], requires_grad=True)
    prox = torch.tensor([[-90.0, -0.2, -1.0]])
    adv = torch.tensor([[-1.0, 1.0, 1.0]])
    mask = torch.ones(1, 3)
    cfg = loss_cfg(clip_eps=0.2, behaviour_weight="none")
    out = L.policy_loss(logp, prox, prox, adv, mask, cfg)
    (grad,) = torch.autograd.grad(out.loss, logp)
    assert torch.isfinite(out.loss) and torch.isfinite(grad).all()
    # token 0 (A < 0): its clamped ratio e^20; token 1: ratio e^0.1 inside the clip range
    expected = (math.exp(L.LOG_RATIO_CLAMP) - math.exp(0.1) - 1.0) / 3
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    k3 = L.kl_estimate(torch.tensor([0.0]), torch.tensor([100.0]), "k3")
    assert torch.isfinite(k3).all()


def test_token_logprobs_at_temperature_match_sampling_distribution():
    logits = torch.randn(2, 4, 11, requires_grad=True)
    tokens = torch.randint(0, 11, (2, 4))
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.float32)
    for temp in (1.0, 0.7):
        lp, ent = L.token_logprobs(logits, tokens, mask, temp)
        probs = torch.softmax(logits.detach() / temp, -1)
        for b in range(2):
            for t in range(4):
                if not mask[b, t]:  # off the loss mask (and position 0): nothing computed
                    assert lp[b, t].item() == 0.0 and ent[b, t].item() == 0.0
                    continue
                p = probs[b, t - 1]
                assert lp[b, t].item() == pytest.approx(p[tokens[b, t]].log().item(), abs=1e-5)
                assert ent[b, t].item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-5)
    assert lp.requires_grad and not ent.requires_grad
    _, ent = L.token_logprobs(logits, tokens, mask, entropy_grad=True)
    assert ent.requires_grad
    # no masked position at all: zeros that still backpropagate (to zero gradients)
    lp, _ = L.token_logprobs(logits, tokens, torch.zeros_like(mask))
    lp.sum().backward()
    assert lp.abs().sum() == 0 and logits.grad.abs().sum() == 0


def test_value_loss_clipping():
    v = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    ret = torch.tensor([[2.0, 1.0]])
    m = torch.ones(1, 2)
    # token 0: unclipped (1-2)^2 = 1, clipped (0.2-2)^2 = 3.24 -> 3.24; token 1: 1
    assert L.value_loss(v, old, ret, m, clip=0.2).item() == pytest.approx(0.5 * (3.24 + 1) / 2)
    assert L.value_loss(v, old, ret, m, clip=None).item() == pytest.approx(0.5)


def test_sft_loss_is_token_mean_nll_on_masked_tokens():
    from agentgym.learner.losses import sft_loss

    logp = torch.tensor([[0.0, -1.0, -2.0, -9.0], [0.0, -0.5, -7.0, -7.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0]], dtype=torch.float32)
    # (1 + 2 + 0.5) / 3 masked tokens
    assert sft_loss(logp, mask).item() == pytest.approx(3.5 / 3)
    # micro-batches normalised by the whole update's tokens add up to the same loss
    halves = sft_loss(logp[:1], mask[:1], num_tokens=3) + sft_loss(logp[1:], mask[1:], num_tokens=3)
    assert halves.item() == pytest.approx(3.5 / 3)


def test_dpo_loss_matches_the_papers_formulas():
    import math

    from agentgym.learner.losses import dpo_loss, sequence_logprobs

    logp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -0.25]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]], dtype=torch.float32)
    assert sequence_logprobs(logp, mask).tolist() == [-3.0, -0.5]
    chosen, rejected = torch.tensor([-3.0, -1.0]), torch.tensor([-4.0, -0.5])
    ref_c, ref_r = torch.tensor([-3.5, -1.0]), torch.tensor([-3.0, -1.5])
    beta = 0.5
    # h = (c - rc) - (r - rr): pair 0: 0.5 - (-1) = 1.5; pair 1: 0 - 1 = -1
    h = [1.5, -1.0]
    expected = -sum(math.log(1 / (1 + math.exp(-beta * x))) for x in h) / 2
    loss, margin = dpo_loss(chosen, rejected, ref_c, ref_r, beta=beta)
    assert loss.item() == pytest.approx(expected)
    assert margin.tolist() == pytest.approx([0.75, -0.5])
    ipo, _ = dpo_loss(chosen, rejected, ref_c, ref_r, beta=beta, kind="ipo")
    assert ipo.item() == pytest.approx(((1.5 - 1) ** 2 + (-1 - 1) ** 2) / 2)
    # the reference model's term matters: with ref = pi the loss is log 2 whatever pi is
    same, _ = dpo_loss(chosen, rejected, chosen, rejected, beta=beta)
    assert same.item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="unknown preference loss"):
        dpo_loss(chosen, rejected, ref_c, ref_r, kind="hinge")


def test_clip_fraction_counts_the_tokens_whose_clipped_term_binds():
    """eps 0.2. Clipped: A > 0 with r = 1.5 and r = 2.0, A < 0 with r = 0.5 (the objective gains
    nothing past the clip). Not clipped: r = 1 (inside), A < 0 with r = 1.5 (the unclipped
    term is the larger loss, so it binds). 3 of 5."""
    ratio = torch.tensor([[1.5, 2.0, 0.5, 1.0, 1.5]])
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0, -1.0]])
    prox = torch.zeros(1, 5)
    cfg = loss_cfg(clip_eps=0.2, behaviour_weight="none")
    out = L.policy_loss(ratio.log(), prox, prox, adv, torch.ones(1, 5), cfg)
    assert out.clip_fraction.item() == pytest.approx(3 / 5)


def test_approx_kl_to_prox_is_positive_when_the_policy_left_the_sampled_tokens():
    """approx_kl_prox = mean over tokens of log pi_prox - log pi_theta (k1 of KL(prox || theta)
    on the sampled tokens): positive when the update made the sampled tokens less likely."""
    prox = torch.log(torch.tensor([[0.5, 0.2, 0.1]]))
    logp = prox + torch.tensor([[-0.3, -0.2, 0.2]])
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    cfg = loss_cfg(behaviour_weight="none")
    out = L.policy_loss(logp, prox, prox, torch.ones(1, 3), mask, cfg)
    assert out.approx_kl_prox.item() == pytest.approx((0.3 + 0.2 - 0.2) / 3)


def test_token_sum_over_a_constant_keeps_a_rows_weight_whatever_joins_its_batch():
    """Two batches equal but for an extra group of long rows without signal (advantage 0):
    seq-mean-token-sum-norm gives the informative rows the same gradient in both; token-mean
    shrinks it by the ratio of generated tokens."""
    gen = torch.Generator().manual_seed(3)
    logp = torch.randn(2, 6, generator=gen).requires_grad_()
    mask = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 1, 1, 0, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([[1.0] * 6, [-1.0] * 6]) * mask
    flat_mask = torch.ones(3, 6)  # three long rows, every token generated, advantage 0

    def grad(mode: str, with_flat: bool) -> torch.Tensor:
        cfg = loss_cfg(aggregation=mode, norm_tokens=40.0)
        lp = logp if not with_flat else torch.cat([logp, torch.zeros(3, 6)])
        m = mask if not with_flat else torch.cat([mask, flat_mask])
        a = adv if not with_flat else torch.cat([adv, torch.zeros(3, 6)])
        logp.grad = None
        L.policy_loss(lp, lp.detach(), lp.detach(), a, m, cfg).loss.backward()
        return logp.grad.clone()

    norm_alone, norm_with = (
        grad("seq-mean-token-sum-norm", False),
        grad("seq-mean-token-sum-norm", True),
    )
    assert torch.equal(norm_alone, norm_with)
    assert norm_alone.abs().sum() > 0
    mean_alone, mean_with = grad("token-mean", False), grad("token-mean", True)
    ratio = float(mask.sum() / (mask.sum() + flat_mask.sum()))
    assert torch.allclose(mean_with, mean_alone * ratio, atol=1e-7)
    # against the constant: the token sum, divided by it
    assert torch.allclose(norm_alone, mean_alone * float(mask.sum()) / 40.0, atol=1e-7)


def test_the_constant_of_the_token_sum_must_be_given():
    logp, prox, adv, mask = random_case(0, B=2)
    with pytest.raises(ValueError, match="norm_tokens"):
        L.aggregate(logp, mask, "seq-mean-token-sum-norm")
