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
