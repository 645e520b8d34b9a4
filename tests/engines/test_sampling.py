"""processed_logprobs matches a slow reference; sampling stays inside the kept set."""

import math

import pytest

torch = pytest.importorskip("torch")

from engine_reference import reference_logprob  # noqa: E402

from agentgym.engines.sampling import processed_logprobs, sample_rows  # noqa: E402


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.6), (0.8, 7, 0.9), (1.0, 1, 1.0)],
)
def test_processed_logprobs_match_reference(temperature: float, top_k: int, top_p: float) -> None:
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(1)) * 3
    got = processed_logprobs(logits, temperature, top_k, top_p)
    for row in range(3):
        for tok in range(40):
            want = reference_logprob(logits[row].tolist(), tok, temperature, top_k, top_p)
            if math.isinf(want):
                assert got[row, tok].item() == -math.inf
            else:
                assert got[row, tok].item() == pytest.approx(want, abs=1e-5)


def test_top_k_keeps_ties() -> None:
    logits = torch.tensor([[2.0, 1.0, 1.0, 0.0]])
    lp = processed_logprobs(logits, 1.0, top_k=2)
    assert torch.isfinite(lp[0, :3]).all() and lp[0, 3].item() == -math.inf


def test_top_p_always_keeps_the_most_likely_token() -> None:
    logits = torch.tensor([[5.0, 0.0, 0.0]])
    lp = processed_logprobs(logits, 1.0, top_p=0.01)
    assert lp[0, 0].item() == pytest.approx(0.0)
    assert torch.isinf(lp[0, 1:]).all()


def test_zero_temperature_is_rejected() -> None:
    with pytest.raises(ValueError):
        processed_logprobs(torch.zeros(1, 3), 0.0)


def test_sample_rows_never_picks_truncated_tokens_and_reports_their_logprob() -> None:
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(2))
    lp = processed_logprobs(logits, 1.0, top_k=3)
    gens = [torch.Generator().manual_seed(i) for i in range(4)]
    for _ in range(50):
        tokens, chosen = sample_rows(lp, gens)
        assert torch.isfinite(chosen).all()
        assert torch.equal(chosen, lp.gather(-1, tokens[:, None])[:, 0])


def test_sample_rows_is_reproducible_per_row_seed() -> None:
    lp = processed_logprobs(torch.randn(2, 50, generator=torch.Generator().manual_seed(3)), 1.0)
    a, _ = sample_rows(lp, [torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)])
    b, _ = sample_rows(lp[1:], [torch.Generator().manual_seed(8)])
    assert a[1] == b[0]


def test_sample_rows_follows_the_distribution() -> None:
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    lp = torch.log(probs).expand(4000, -1)
    gens = [torch.Generator().manual_seed(i) for i in range(4000)]
    tokens, chosen = sample_rows(lp, gens)
    freq = torch.bincount(tokens, minlength=6).float() / 4000
    assert freq[1] == 0 and freq[5] == 0  # no mass, never drawn (also not at the CDF's top)
    assert freq.tolist() == pytest.approx(probs.tolist(), abs=0.025)  # > 3 sigma at n = 4000
    assert torch.equal(chosen, lp.gather(-1, tokens[:, None])[:, 0])
