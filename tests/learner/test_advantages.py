"""Advantage estimators on hand-computed numbers."""

import math

import pytest

torch = pytest.importorskip("torch")

from agentgym.learner import advantages as A  # noqa: E402

# two turns of generated tokens separated by an environment turn, then a trailing env reply
MULTI_TURN = torch.tensor(
    [
        [0, 1, 1, 0, 0, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0, 0, 0, 0],
    ],
    dtype=torch.float32,
)


def test_reward_sits_on_last_generated_token_not_last_token():
    r = A.outcome_token_rewards(torch.tensor([2.0, -1.0]), MULTI_TURN)
    expected = torch.zeros(2, 9)
    expected[0, 6] = 2.0
    expected[1, 4] = -1.0
    assert torch.equal(r, expected)
    assert A.last_generated_index(MULTI_TURN).tolist() == [6, 4]


def test_sequence_without_generated_tokens_gets_nothing():
    mask = torch.tensor([[0, 0, 0], [0, 1, 0]], dtype=torch.float32)
    r = A.outcome_token_rewards(torch.tensor([5.0, 1.0]), mask)
    assert r.tolist() == [[0, 0, 0], [0, 1, 0]]


def test_grpo_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0])
    groups = torch.tensor([0, 0, 0, 0, 1])
    mask = torch.ones(5, 2)
    adv = A.grpo(rewards, groups, mask, eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert adv[:, 0].tolist() == pytest.approx([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0])
    dr = A.grpo(rewards, groups, mask, normalize_std=False)
    assert dr[:, 1].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.0])


def test_grpo_group_of_one_and_all_equal_are_zero():
    rewards = torch.tensor([7.0, 2.0, 2.0, 2.0])
    groups = torch.tensor([0, 1, 1, 1])
    adv = A.grpo(rewards, groups, torch.ones(4, 3))
    assert torch.equal(adv, torch.zeros(4, 3))
    assert not torch.isnan(adv).any()


def test_advantages_are_zero_off_mask():
    adv = A.grpo(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), MULTI_TURN)
    assert torch.equal(adv != 0, MULTI_TURN.bool())


def test_rloo_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 2.0, 5.0])
    groups = torch.tensor([0, 0, 0, 1])
    adv = A.rloo(rewards, groups, torch.ones(4, 1))[:, 0]
    # 1 - (0+2)/2 = 0; 0 - (1+2)/2 = -1.5; 2 - (1+0)/2 = 1.5; single -> 0
    assert adv.tolist() == pytest.approx([0.0, -1.5, 1.5, 0.0])
    same = A.rloo(torch.tensor([3.0, 3.0]), torch.tensor([0, 0]), torch.ones(2, 1))
    assert torch.equal(same, torch.zeros(2, 1))


def test_returns_skip_environment_tokens():
    token_rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]], dtype=torch.float32)
    g = A.discounted_returns(token_rewards, mask, gamma=0.5)
    # generated positions 0,1,4: G4 = 2, G1 = 1 + 0.5*2 = 2, G0 = 0 + 0.5*2 = 1
    assert g.tolist() == [[1.0, 2.0, 0.0, 0.0, 2.0, 0.0]]


def test_reinforce_pp_whitens_over_generated_tokens():
    rewards = torch.tensor([1.0, 0.0])
    adv = A.reinforce_pp(rewards, MULTI_TURN)
    # gamma 1, no KL: returns are 1 on the 4 tokens of seq 0 and 0 on the 3 of seq 1;
    # unbiased variance over the 7 tokens (as verl's masked_whiten), plus 1e-8 under the root
    mean = 4 / 7
    std = math.sqrt(4 / 7 * 3 / 7 * 7 / 6 + 1e-8)
    on = MULTI_TURN.bool()
    assert adv[0][on[0]].tolist() == pytest.approx([(1 - mean) / std] * 4)
    assert adv[1][on[1]].tolist() == pytest.approx([-mean / std] * 3)
    assert torch.equal(adv[~on], torch.zeros(int((~on).sum())))
    assert adv[on].mean().item() == pytest.approx(0.0, abs=1e-6)


def test_reinforce_pp_kl_penalty_is_per_token():
    mask = torch.tensor([[1, 1, 1]], dtype=torch.float32)
    kl = torch.tensor([[0.5, 0.0, 1.0]])
    # rewards r = [-0.05, 0, 1 - 0.1] -> returns [0.85, 0.9, 0.9]; whitened over 3 tokens
    adv = A.reinforce_pp(torch.tensor([1.0]), mask, kl=kl, kl_coef=0.1)
    g = torch.tensor([0.85, 0.9, 0.9])
    expected = (g - g.mean()) / (g.var(unbiased=True) + 1e-8).sqrt()
    assert adv[0].tolist() == pytest.approx(expected.tolist(), abs=1e-4)


def test_reinforce_pp_baseline_subtracts_group_mean_first():
    mask = torch.ones(4, 1)
    rewards = torch.tensor([1.0, 0.0, 5.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1])
    adv = A.reinforce_pp_baseline(rewards, groups, mask)[:, 0]
    # centered [0.5, -0.5, 0, 0]: mean 0, unbiased variance 0.5 / 3
    s = math.sqrt(0.5 / 3 + 1e-8)
    assert adv.tolist() == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.0], abs=1e-5)


def test_gae_hand_computed_across_turns():
    mask = torch.tensor([[1, 1, 0, 1]], dtype=torch.float32)
    values = torch.tensor([[0.5, 0.2, 9.0, 0.4]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    adv, ret = A.gae(rewards, values, mask, gamma=0.9, lam=0.5)
    d3 = 1.0 - 0.4
    d1 = 0.0 + 0.9 * 0.4 - 0.2  # the env token's value (9.0) is skipped
    d0 = 0.0 + 0.9 * 0.2 - 0.5
    a3 = d3
    a1 = d1 + 0.45 * a3
    a0 = d0 + 0.45 * a1
    assert adv[0].tolist() == pytest.approx([a0, a1, 0.0, a3])
    assert ret[0].tolist() == pytest.approx([a0 + 0.5, a1 + 0.2, 0.0, a3 + 0.4])


# Groups and batches without signal: rewards equal up to float32 rounding must give exactly 0,
# not rounding divided by a near-zero spread.


def test_uniform_groups_get_exactly_zero_reinforce_pp_baseline():
    g = torch.arange(18) // 6
    rewards = torch.tensor([0.9, 0.0, 1.0]).repeat_interleave(6)
    adv = A.reinforce_pp_baseline(rewards, g, torch.ones(18, 30))
    assert torch.equal(adv, torch.zeros(18, 30))


def test_uniform_batch_gets_exactly_zero_reinforce_pp():
    adv = A.reinforce_pp(torch.full((16,), 0.9), torch.ones(16, 30))
    assert torch.equal(adv, torch.zeros(16, 30))


def test_uniform_group_gets_exactly_zero_grpo():
    adv = A.grpo(torch.full((6,), 0.9), torch.zeros(6, dtype=torch.long), torch.ones(6, 4))
    assert torch.equal(adv, torch.zeros(6, 4))


def _babyai_rewards(steps: list[int], max_steps: int, variant: int) -> torch.Tensor:
    """BabyAI's ``1 - 0.9 * steps / max_steps`` in float32, by two orders of operations."""
    s = torch.tensor(steps, dtype=torch.float32)
    m = torch.tensor(float(max_steps), dtype=torch.float32)
    if variant == 0:
        return 1 - torch.tensor(0.9) * s / m
    return 1 - s * (torch.tensor(0.9) / m)


def test_babyai_float32_rewards_equal_up_to_rounding_are_flat():
    # the same step count reached through two float32 formulas differs in the last bit for
    # some (steps, max_steps); such a group must still be flat
    found = 0
    for max_steps in (64, 80, 100, 576, 1000):
        for steps in range(1, max_steps):
            a = _babyai_rewards([steps], max_steps, 0)
            b = _babyai_rewards([steps], max_steps, 1)
            if a.item() == b.item():
                continue
            found += 1
            rewards = torch.cat([a, b, a, b])
            groups = torch.zeros(4, dtype=torch.long)
            mask = torch.ones(4, 5)
            assert torch.equal(A.grpo(rewards, groups, mask), torch.zeros(4, 5))
            assert torch.equal(A.reinforce_pp_baseline(rewards, groups, mask), torch.zeros(4, 5))
            assert torch.equal(A.reinforce_pp(rewards, mask), torch.zeros(4, 5))
    assert found > 10  # the test exercises real 1-ulp differences


def test_babyai_rewards_one_step_apart_keep_full_signal():
    # a real difference (one step of 1000) is signal: +-1/sqrt(...) as for any two values
    rewards = torch.cat([_babyai_rewards([500], 1000, 0), _babyai_rewards([501], 1000, 0)])
    adv = A.grpo(rewards, torch.zeros(2, dtype=torch.long), torch.ones(2, 1), eps=0.0)
    assert adv[:, 0].tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], rel=1e-4)


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"])
def test_adding_a_constant_to_a_group_changes_no_advantage(estimator):
    gen = torch.Generator().manual_seed(0)
    groups = torch.arange(24) // 4
    mask = (torch.rand(24, 7, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    # rewards on a 1/64 grid and constants on a 1/4 grid: every sum is exact in float32, so
    # any change in the advantages comes from the estimator, not from the inputs
    rewards = torch.randint(0, 64, (24,), generator=gen).float() / 64
    rewards[:4] = 0.75  # one flat group
    shift = (torch.randint(-40, 40, (6,), generator=gen).float() / 4)[groups]

    def run(r):
        if estimator in ("grpo", "dr_grpo"):
            return A.grpo(r, groups, mask, normalize_std=estimator == "grpo")
        if estimator == "rloo":
            return A.rloo(r, groups, mask)
        return A.reinforce_pp_baseline(r, groups, mask)

    before, after = run(rewards), run(rewards + shift)
    assert torch.allclose(before, after, atol=1e-6, rtol=0)
    if estimator != "reinforce_pp_baseline":  # there, batch whitening moves a flat group too
        assert torch.equal(before[:4], torch.zeros(4, 7))
        assert torch.equal(after[:4], torch.zeros(4, 7))


def test_adding_a_constant_with_float32_rounding_keeps_flat_groups_flat():
    # arbitrary float32 rewards and constants: sums round, but flat groups stay exactly 0 and
    # the others move by rounding only
    gen = torch.Generator().manual_seed(1)
    groups = torch.arange(30) // 5
    rewards = torch.rand(30, generator=gen)
    rewards[10:15] = rewards[10]
    shift = (torch.rand(6, generator=gen) * 10)[groups]
    mask = torch.ones(30, 3)
    before, after = A.grpo(rewards, groups, mask), A.grpo(rewards + shift, groups, mask)
    assert torch.equal(after[10:15], torch.zeros(5, 3))
    assert torch.allclose(before, after, atol=1e-4, rtol=0)


def test_masked_whiten_uses_rsqrt_of_var_plus_eps():
    x = torch.tensor([[1.0, 2.0, 4.0, 100.0]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    out = A.masked_whiten(x, m, eps=0.5)
    mean, var = 7 / 3, ((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2
    expected = [(v - mean) / math.sqrt(var + 0.5) for v in (1.0, 2.0, 4.0)] + [0.0]
    assert out[0].tolist() == pytest.approx(expected)
    assert out.dtype == torch.float32
    assert torch.equal(A.masked_whiten(x, torch.zeros_like(m)), torch.zeros_like(x))


def test_the_estimator_table_holds_exactly_the_names_a_config_may_give():
    """The config checks ``learner.advantage.estimator`` against its own list of names (it is
    read without torch): each must have an entry in the table, and each entry a name."""
    import typing

    from agentgym.learner.config import EstimatorName

    assert tuple(A.ESTIMATORS) == typing.get_args(EstimatorName)


def test_estimate_dispatches_on_the_configured_name():
    from agentgym.learner.config import AdvantageConfig

    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    groups = torch.tensor([0, 0, 1, 1])
    mask = torch.ones(4, 3)
    inputs = A.EstimatorInputs(rewards, groups, mask)
    adv, returns = A.estimate(inputs, AdvantageConfig(estimator="dr_grpo"))
    assert returns is None
    assert torch.equal(adv, A.grpo(rewards, groups, mask, normalize_std=False))
    adv, _ = A.estimate(inputs, AdvantageConfig(estimator="rloo"))
    assert torch.equal(adv, A.rloo(rewards, groups, mask))
