from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from tenor.checkpoints.gguf import _dequantize_q8_k, load_gguf, rotary_row_order
from tenor.errors import CheckpointError
from tenor.models import native
from tenor.models.block_weights import ByteBlocks, NibbleBlocks, PackedRows
from tenor.models.model import build_model
from tenor.registry import SMOLLM2_135M
from tests.checkpoints.tiny_gguf import LAYER_NAMES, copy_gguf, llama_cpp_permute, write_llama_gguf
from tests.checkpoints.tiny_hf import assert_matches_hf, llama_pieces, make_llama
from tests.models.single_sequence import prefill_logits


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> dict[str, torch.Tensor]:
    # d=32 so rows are whole Q8_0 blocks; 4 heads / 2 kv heads exercise both permutations.
    return make_llama(tmp_path_factory.mktemp("hf"), rope=None)


def _write(path: Path, hf, **kwargs) -> Path:
    write_llama_gguf(path, hf, heads=4, kv_heads=2, ffn=48, **kwargs)
    return path


def test_rotary_row_order_inverts_llama_cpp_permute():
    for heads, head_dim in [(1, 2), (3, 8), (9, 64)]:
        rows = np.arange(heads * head_dim * 5).reshape(heads * head_dim, 5)
        permuted = llama_cpp_permute(rows, heads)
        assert not np.array_equal(permuted, rows) or head_dim == 2
        assert np.array_equal(permuted[rotary_row_order(heads * head_dim, heads)], rows)


def test_float_gguf_matches_hf(tmp_path, tiny_hf):
    loaded = load_gguf(_write(tmp_path / "m.gguf", tiny_hf))
    c = loaded.config
    assert (c.arch, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) == ("llama", 96, 32, 48, 2)
    assert (c.num_heads, c.num_kv_heads, c.head_dim, c.rope_theta, c.norm_eps) == (4, 2, 8, 50000.0, 1e-5)
    assert (c.max_position_embeddings, c.bos_token_id, c.eos_token_ids) == (256, 1, (2,))
    assert not c.tie_word_embeddings and c.rope_scaling is None
    assert (loaded.kind, loaded.tokenizer_path) == ("gguf", None)  # no tokenizer.ggml.tokens in this file
    assert_matches_hf(loaded.weights, tiny_hf, llama_pieces(2, tied=False))


@pytest.mark.parametrize(
    "hf_types",
    [
        {"q_proj": Q.Q8_0, "k_proj": Q.Q8_0, "v_proj": Q.Q8_0, "gate_proj": Q.Q8_0, "up_proj": Q.Q8_0},
        {"q_proj": Q.Q8_0, "k_proj": Q.Q8_0, "gate_proj": Q.Q8_0, "up_proj": Q.BF16, "embed_tokens": Q.Q8_0},
    ],
    ids=["same-type", "mixed"],
)
def test_quantized_types(tmp_path, tiny_hf, hf_types):
    """Quantized q/k rows are reordered before dequantizing and same-type pieces stacked raw;
    the result must equal what quantization alone does to each HF tensor."""
    by_suffix = {hf.split(".")[-2]: g for hf, g in LAYER_NAMES.items()} | {"embed_tokens": "token_embd.weight"}
    loaded = load_gguf(_write(tmp_path / "m.gguf", tiny_hf, qtypes={by_suffix[k]: t for k, t in hf_types.items()}))
    expected = {}
    for name, tensor in tiny_hf.items():
        qtype = hf_types.get(name.split(".")[-2])
        if qtype is None:
            expected[name] = tensor
        else:
            data = gguf.quants.quantize(tensor.numpy(), qtype)
            expected[name] = torch.from_numpy(gguf.quants.dequantize(data, qtype).reshape(tensor.shape).copy())
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(expected[q], tiny_hf[q])  # the quantization did change the values
    assert_matches_hf(loaded.weights, expected, llama_pieces(2, tied=False))


def test_weights_in_block_types_kept_as_their_blocks(tmp_path, tiny_hf):
    """keep_blocks: a linear (or the embedding) whose pieces all hold 4-bit levels comes as its
    NibbleBlocks, one whose pieces' levels fit a byte as ByteBlocks (q/k rows reordered and
    q/k/v stacked as for floats), their floats the float path's exactly; a linear with a float
    piece, and the other tensors, stay floats."""
    qtypes = {"attn_q.weight": Q.Q4_1, "attn_k.weight": Q.Q4_0, "attn_v.weight": Q.Q8_0}
    qtypes |= {"attn_output.weight": Q.Q4_0, "token_embd.weight": Q.Q8_0, "output.weight": Q.Q5_1}
    qtypes |= {"ffn_gate.weight": Q.Q5_0}  # ffn_up stays float32; ffn_down's rows (48) are not whole blocks
    path = _write(tmp_path / "m.gguf", tiny_hf, qtypes=qtypes)
    floats, kept = load_gguf(path), load_gguf(path, keep_blocks=True)
    assert floats.blocks == {}
    nibbles = {f"layers.{i}.attn.o.weight" for i in range(2)}
    in_bytes = {f"layers.{i}.attn.qkv.weight" for i in range(2)} | {"embed.weight", "lm_head.weight"}
    assert set(kept.blocks) == nibbles | in_bytes
    assert set(kept.weights) == set(floats.weights) - set(kept.blocks)
    for name, blocks in kept.blocks.items():
        assert isinstance(blocks, NibbleBlocks if name in nibbles else ByteBlocks), name
        assert blocks.shape == tuple(floats.weights[name].shape)
        assert torch.equal(blocks.dequantize(), floats.weights[name]), name


@pytest.mark.skipif(not native.available(), reason="the integer kernels need tenor's native kernels (a C compiler)")
def test_a_tied_embedding_in_4_bit_blocks_serves_lookups_and_the_lm_head(tmp_path, tiny_hf):
    """A tied Q4_0 embedding kept as its blocks: the model looks rows up from them (the float
    table's values) and its LM head reads them as 4-bit levels."""
    hf = {k: v for k, v in tiny_hf.items() if k != "lm_head.weight"}
    path = _write(tmp_path / "m.gguf", hf, qtypes={"token_embd.weight": Q.Q4_0})
    kept, floats = load_gguf(path, keep_blocks=True), load_gguf(path)
    assert kept.config.tie_word_embeddings and isinstance(kept.blocks["embed.weight"], NibbleBlocks)
    from_blocks = build_model(kept.config, {**kept.weights, **kept.blocks}, torch.float32, "int8a8")
    from_floats = build_model(floats.config, floats.weights, torch.float32, "dense")
    assert isinstance(from_blocks.embed_blocks, NibbleBlocks) and from_blocks.lm_head.kernel.bits == 4
    ids = torch.tensor([5, 0, 95, 5])
    rows = from_blocks.embed_tokens(ids)
    assert torch.equal(rows, from_floats.embed_tokens(ids))
    expected = from_floats.lm_head(rows)  # float32 products; the kernel's x goes to int16 per block
    assert (from_blocks.lm_head(rows) - expected).abs().max() <= 2e-4 * expected.abs().max()


def q6_k_rows(rows: int, width: int, seed: int) -> np.ndarray:
    """Random Q6_K super-blocks (210 bytes a 256 values; the gguf package cannot quantize to
    them): random levels and scales, a finite float16 step last."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, width // 256, 210), dtype=np.uint8)
    raw[..., 208:] = (rng.standard_normal((rows, width // 256, 1)) * 1e-3).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.fixture(scope="module")
def q6_k_embedding(tmp_path_factory) -> Path:
    """A tied llama whose embedding is Q6_K, as llama.cpp's Q4_K_M makes a tied embedding."""
    root = tmp_path_factory.mktemp("q6k")
    hf = make_llama(root / "hf", tie=True, rope=None, hidden_size=256)
    hf = {k: v for k, v in hf.items() if k != "lm_head.weight"}
    write_llama_gguf(root / "f32.gguf", hf, heads=4, kv_heads=2, ffn=48)
    replace = {"token_embd.weight": (q6_k_rows(96, 256, seed=3), Q.Q6_K)}
    copy_gguf(root / "f32.gguf", root / "q6k.gguf", replace=replace)
    return root / "q6k.gguf"


def test_a_q6_k_embedding_is_kept_as_its_rows_bytes(q6_k_embedding):
    """keep_blocks: a Q6_K embedding (no one step per 32, so no blocks) comes as its rows' own
    bytes, which dequantize to the float path's table exactly; a model looks its rows up from
    them (0.82 bytes a value) and its tied LM head is made from their values, so its logits are
    the float table's bit for bit."""
    kept, floats = load_gguf(q6_k_embedding, keep_blocks=True), load_gguf(q6_k_embedding)
    rows = kept.blocks["embed.weight"]
    assert isinstance(rows, PackedRows) and rows.shape == (96, 256) and rows.raw.numel() == 96 * 210
    assert torch.equal(rows.dequantize(), floats.weights["embed.weight"])
    from_rows = build_model(kept.config, {**kept.weights, **kept.blocks}, torch.float32, "int8")
    from_table = build_model(floats.config, floats.weights, torch.float32, "int8")
    assert from_rows.embed.numel() == 0 and from_rows.embed_blocks is rows
    ids = torch.tensor([5, 0, 95, 5])
    assert torch.equal(from_rows.embed_tokens(ids), floats.weights["embed.weight"][ids])
    prompt = [1, 17, 40, 93, 2, 60]
    assert torch.equal(prefill_logits(from_rows, prompt), prefill_logits(from_table, prompt))


@pytest.mark.parametrize("qtype", [Q.F16, Q.F32])
def test_a_16_bit_embedding_is_kept_as_its_rows(tmp_path, tiny_hf, qtype):
    """An F16 embedding's rows stay 16-bit (half float32's bytes), widened exactly as they are
    looked up; an F32 one is the float table itself."""
    path = _write(tmp_path / "m.gguf", tiny_hf, qtypes={"token_embd.weight": qtype})
    kept, floats = load_gguf(path, keep_blocks=True), load_gguf(path)
    if qtype == Q.F32:
        assert "embed.weight" not in kept.blocks and "embed.weight" in kept.weights
        return
    rows = kept.blocks["embed.weight"]
    assert isinstance(rows, PackedRows) and rows.raw.dtype == torch.float16
    assert torch.equal(rows.dequantize(), floats.weights["embed.weight"])
    ids = torch.tensor([95, 3, 3])
    assert torch.equal(rows.rows(ids), floats.weights["embed.weight"][ids])


def test_an_embedding_of_a_type_without_a_dequantizer_fails_at_load(tmp_path, q6_k_embedding):
    q8_1 = np.zeros((96, 8 * 40), dtype=np.uint8)  # Q8_1: 32 values in 40 bytes, no dequantizer
    copy_gguf(q6_k_embedding, tmp_path / "q.gguf", replace={"token_embd.weight": (q8_1, Q.Q8_1)})
    with pytest.raises(CheckpointError, match=r"q\.gguf: tensor token_embd\.weight has GGUF type Q8_1"):
        load_gguf(tmp_path / "q.gguf", keep_blocks=True)


def test_tied_when_output_is_absent(tmp_path, tiny_hf):
    hf = {k: v for k, v in tiny_hf.items() if k != "lm_head.weight"}
    loaded = load_gguf(_write(tmp_path / "m.gguf", hf))
    assert loaded.config.tie_word_embeddings and "lm_head.weight" not in loaded.weights


def test_unsupported_quant_type(tmp_path, tiny_hf):
    # Q8_1 (llama.cpp's activation format) has no dequantizer; a block is 32 values in 40 bytes.
    path = _write(tmp_path / "m.gguf", tiny_hf)
    q8_1 = np.zeros((16, 40), dtype=np.uint8)  # blk.1.attn_v is [16, 32]
    copy_gguf(path, tmp_path / "q.gguf", replace={"blk.1.attn_v.weight": (q8_1, Q.Q8_1)})
    with pytest.raises(
        CheckpointError,
        match=r"q\.gguf: tensor blk\.1\.attn_v\.weight has GGUF type Q8_1, "
        r"which tenor cannot import",
    ):
        load_gguf(tmp_path / "q.gguf")


@pytest.mark.parametrize("keep", [0.5, 0.02])
def test_truncated(tmp_path, tiny_hf, keep):
    path = _write(tmp_path / "m.gguf", tiny_hf)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=r"m\.gguf: .*truncated"):
        load_gguf(path)


def test_wrong_architecture_and_shapes(tmp_path, tiny_hf):
    with pytest.raises(CheckpointError, match=r"m\.gguf: GGUF architecture 'gpt2' is not supported"):
        load_gguf(_write(tmp_path / "m.gguf", tiny_hf, arch="gpt2"))
    bad = dict(tiny_hf)
    bad["model.layers.1.mlp.down_proj.weight"] = torch.zeros(32, 40)
    with pytest.raises(
        CheckpointError,
        match=r"tensor blk\.1\.ffn_down\.weight has shape \[32, 40\], "
        r"expected \[32, 48\]",
    ):
        load_gguf(_write(tmp_path / "bad.gguf", bad))
    with pytest.raises(CheckpointError, match="llama3-style rope_freqs"):
        load_gguf(_write(tmp_path / "rope.gguf", tiny_hf, extra={"rope_freqs.weight": np.ones(4, np.float32)}))
    with pytest.raises(CheckpointError, match=r"unexpected tensor blk\.0\.attn_q\.bias"):
        load_gguf(_write(tmp_path / "bias.gguf", tiny_hf, extra={"blk.0.attn_q.bias": np.ones(32, np.float32)}))
    copy_gguf(_write(tmp_path / "m2.gguf", tiny_hf), tmp_path / "nometa.gguf", drop_keys=("llama.feed_forward_length",))
    with pytest.raises(CheckpointError, match=r"nometa\.gguf: GGUF metadata llama\.feed_forward_length is missing"):
        load_gguf(tmp_path / "nometa.gguf")
    with pytest.raises(CheckpointError, match="no such GGUF file"):
        load_gguf(tmp_path / "nope.gguf")


def test_q8_k_dequantize():
    quants = np.arange(-128, 128, dtype=np.int8)
    block = np.concatenate([np.array([0.5], np.float32).view(np.uint8), quants.view(np.uint8), np.zeros(32, np.uint8)])
    data = np.stack([block, block])
    assert np.array_equal(_dequantize_q8_k(data), np.stack([quants * 0.5, quants * 0.5]).astype(np.float32))


@pytest.fixture(scope="module")
def default_gguf() -> Path:
    from tenor.checkpoints.default_model import default_gguf_path

    try:
        return default_gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def smollm(default_gguf):
    return load_gguf(default_gguf)


def test_default_model(smollm, default_gguf):
    assert smollm.config == SMOLLM2_135M
    assert smollm.tokenizer_path == default_gguf and smollm.kind == "gguf"
    assert "lm_head.weight" not in smollm.weights
    assert all(t.dtype == torch.float32 for t in smollm.weights.values())


def test_default_model_blocks(smollm, default_gguf):
    """Each of the default model's 120 linears is Q4_1 and its tied embedding Q8_0; each comes as
    its blocks, as exact as floats."""
    kept = load_gguf(default_gguf, keep_blocks=True)
    assert isinstance(kept.blocks["embed.weight"], ByteBlocks) and "embed.weight" not in kept.weights
    linears = [blocks for name, blocks in kept.blocks.items() if name != "embed.weight"]
    assert len(linears) == 4 * SMOLLM2_135M.num_layers
    assert all(isinstance(blocks, NibbleBlocks) for blocks in linears)
    for name, blocks in kept.blocks.items():
        assert torch.equal(blocks.dequantize(), smollm.weights[name]), name


@pytest.mark.slow
def test_default_model_matches_transformers(smollm, default_gguf, tmp_path, monkeypatch):
    """HF transformers' own GGUF loader, on the first two blocks of the default model
    (the same tensor bytes; the full file takes HF ~20 s of CPU)."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    copy_gguf(default_gguf, tmp_path / "small.gguf", layers=2, drop_arrays=True)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="small.gguf", dtype=torch.float32).state_dict()
    small = load_gguf(tmp_path / "small.gguf")
    assert small.config.num_layers == 2
    for name, tensor in small.weights.items():  # the cut file reads exactly as the full one
        assert torch.equal(tensor, smollm.weights[name]), name
    hf.pop("lm_head.weight")  # tied: HF's state dict lists the embedding twice
    assert_matches_hf(small.weights, hf, llama_pieces(2, tied=True))
