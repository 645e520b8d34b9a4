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
    # gamma 1, no KL: returns are 1 on the 4 tokens of seq 0 and 0 on the 3 of seq 1
    mean, std = 4 / 7, math.sqrt(4 / 7 * 3 / 7)
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
    expected = (g - g.mean()) / (g.var(unbiased=False).sqrt() + 1e-8)
    assert adv[0].tolist() == pytest.approx(expected.tolist(), abs=1e-4)


def test_reinforce_pp_baseline_subtracts_group_mean_first():
    mask = torch.ones(4, 1)
    rewards = torch.tensor([1.0, 0.0, 5.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1])
    adv = A.reinforce_pp_baseline(rewards, groups, mask)[:, 0]
    # centered [0.5, -0.5, 0, 0]: mean 0, std sqrt(0.125)
    s = math.sqrt(0.125)
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
