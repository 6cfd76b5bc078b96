from __future__ import annotations

import pytest

from tenor import registry
from tenor.admin.model_specs import (
    kv_cache_bytes,
    model_server_overrides,
    placement_of,
    serving_overrides,
    validate_spec,
)
from tenor.admin.naming import CellName
from tenor.admin.store import ModelSpec
from tenor.errors import UserError

CELL = CellName("c")


def spec(
    config: str = "test.TinyLlamaRandom", checkpoint: str | None = None, replicas: int = 1, **overrides: str
) -> ModelSpec:
    return ModelSpec.make("/tenor/c/m", config, checkpoint, replicas, overrides)


def test_memory_estimate_is_weights_plus_full_kv_cache() -> None:
    tiny = registry.get("test.TinyLlamaRandom")
    m = tiny.model
    # float32: 4 bytes; keys and values for every layer, slot and position.
    assert kv_cache_bytes(tiny) == 2 * m.num_layers * m.num_kv_heads * m.head_dim * 4 * 8 * 512
    assert placement_of(spec()).memory_bytes == tiny.weight_bytes() + kv_cache_bytes(tiny)
    halved = placement_of(spec(max_batch_size="4")).memory_bytes
    assert halved == tiny.weight_bytes() + kv_cache_bytes(tiny) // 2


def test_admin_keys_steer_placement_and_are_not_sent_to_servers() -> None:
    placement = placement_of(spec(ram="1000", constraints="gpu, fast,", max_batch_size="2"))
    assert placement.memory_bytes == 1000 and placement.constraints == frozenset({"gpu", "fast"})
    overrides = {"ram": "1000", "constraints": "gpu", "max_batch_size": "2", "dtype": "float32"}
    assert model_server_overrides(overrides) == {"max_batch_size": "2", "dtype": "float32"}
    assert serving_overrides(overrides) == {"max_batch_size": 2, "dtype": "float32"}  # bare strings allowed


BAD = [
    (lambda: spec(config="nope.X"), "unknown model config 'nope.X'"),
    (lambda: spec(ram="lots"), "ram must be a whole number of bytes"),
    (lambda: spec(ram="-5"), "ram must be a whole number of bytes"),
    (lambda: spec(ram="1.5"), "ram must be a whole number of bytes"),
    (lambda: spec(max_batch_size="0"), "max_batch_size must be >= 1"),
    (lambda: spec(nope="1"), "unknown override(s) nope"),
    (lambda: spec(config="gptj.GPTJ6B_BF16"), "needs a checkpoint"),
    (lambda: ModelSpec.make("/tenor/other/m", "test.TinyLlamaRandom", None, 1), "not in this admin's cell"),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_specs_are_one_line_user_errors(index: int) -> None:
    make, message = BAD[index]
    with pytest.raises(UserError) as info:
        validate_spec(make(), CELL)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_good_specs_pass() -> None:
    validate_spec(spec(), CELL)
    validate_spec(spec(config="gptj.GPTJ6B_BF16", checkpoint="/ckpt"), CELL)
    validate_spec(spec(config="llama.SmolLM2_135M_Instruct"), CELL)  # has a default checkpoint
    with pytest.raises(ValueError, match="replicas must be an integer >= 0"):
        spec(replicas=-1)


def test_disaggregation_keys_are_the_admins_and_place_single_processes() -> None:
    split = {"disaggregated": "true", "prefill_replicas": "1", "decode_replicas": "2"}
    placement = validate_spec(spec(replicas=3, **split), CELL)
    assert placement.roles is not None and placement.roles.demand() == (("prefill", 1), ("decode", 2))
    assert placement.group_sizes == (1,)  # test.TinyLlamaRandom may run on groups of 2, but groups move no KV
    assert placement_of(spec()).group_sizes == (1, 2)
    assert model_server_overrides({**split, "max_batch_size": "2"}) == {"max_batch_size": "2"}
    with pytest.raises(UserError, match="replica count 2 must equal"):
        validate_spec(spec(replicas=2, **split), CELL)
