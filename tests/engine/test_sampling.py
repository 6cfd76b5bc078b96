import pytest
import torch

from tenor.engine.api import SamplingParams
from tenor.engine.sampling import make_generator


@pytest.mark.parametrize("seed", [0, 20_000_000_000_000, -(2**63), 2**63 - 1, -1])
def test_any_int64_seed_makes_a_repeatable_generator(seed):
    params = SamplingParams(temperature=1.0, seed=seed, n=2)
    first, again, other = make_generator(params, 0), make_generator(params, 0), make_generator(params, 1)
    draws = [torch.rand(4, generator=g).tolist() for g in (first, again, other)]
    assert draws[0] == draws[1] and draws[0] != draws[2]


def test_greedy_needs_no_generator():
    assert make_generator(SamplingParams(temperature=0.0, seed=5), 0) is None


@pytest.mark.parametrize("broken_row", [False, True])  # a nan logit: torch's ops take over
def test_picks_and_their_logprobs_are_the_log_softmax_ones(broken_row):
    from tenor.engine.sampling import sample

    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0)) * 4
    if broken_row:
        logits[2, 3] = float("nan")
    params = [SamplingParams(logprobs=3), SamplingParams(temperature=0.7, seed=1), SamplingParams()]
    picks = sample(logits, params, [make_generator(p, 0) for p in params])
    reference = torch.log_softmax(logits, dim=-1)
    assert picks[0].token_id == int(logits[0].argmax()) and picks[2].token_id == int(logits[2].argmax())
    for row, pick in enumerate(picks[:2]):
        assert pick.logprob == pytest.approx(float(reference[row, pick.token_id]), abs=1e-5)
    values, ids = reference[0].topk(3)
    assert [i for i, _ in picks[0].top] == ids.tolist()
    assert [v for _, v in picks[0].top] == pytest.approx(values.tolist(), abs=1e-5)
