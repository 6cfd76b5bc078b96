"""Tokenizers built from GGUF metadata: our fast path against transformers' conversion."""

from __future__ import annotations

import pytest

from tenor.checkpoints.gguf_file import read_gguf_metadata
from tenor.errors import CheckpointError, UserError
from tenor.tokenizer import load_tokenizer
from tenor.tokenizer.gguf_tokenizer import byte_alphabet
from tests.tokenizer.conftest import write_tiny_gguf

MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "1 2", "12 3", "Ġ Ġ", "Ġ 1", "' s", "Ġ ä"]
TEXTS = ["the cat's 12345 in  123 a\n\n the", "It'S 1234567  x\tä", "héllo 世界 🎉 <|im_end|>"]


def test_byte_alphabet_is_gpt2s():
    spelling = byte_alphabet()
    assert len(set(spelling.values())) == 256
    assert spelling[ord("a")] == "a" and spelling[ord(" ")] == "Ġ" and spelling[ord("\n")] == "Ċ"
    assert spelling[0] == chr(256)


def test_metadata_reader(tmp_path):
    path = write_tiny_gguf(tmp_path / "t.gguf", "gpt-2", MERGES, chat_template="{{ 'x' }}")
    everything = read_gguf_metadata(path, wanted_arrays=("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"))
    assert everything["general.architecture"] == "llama"
    assert everything["llama.block_count"] == 1
    assert everything["tokenizer.ggml.tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert everything["tokenizer.ggml.token_type"][:4] == [3, 3, 3, 1]
    assert everything["tokenizer.ggml.merges"] == len(MERGES)  # not asked for: only its length
    assert everything["tokenizer.ggml.add_bos_token"] is False
    assert everything["tokenizer.chat_template"] == "{{ 'x' }}"


@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2"])
def test_pre_tokenizers_match_transformers(tmp_path, pre):
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    path = write_tiny_gguf(tmp_path / f"{pre}.gguf", pre, MERGES)
    ours = load_tokenizer(path)
    theirs = TokenizersBackend.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text), text
        assert ours.decode(ours.encode(text)) == theirs.decode(theirs.encode(text), skip_special_tokens=True)


def test_smollm_pre_tokenizer_splits_digits_like_the_model(tmp_path, smollm):
    """The model's tokenizer (and llama.cpp's "smollm") cuts digits out before the GPT-2
    split, so a run of spaces before a digit stays one piece. transformers' GGUF conversion
    does not know "smollm" and splits it the GPT-2 way: Ġ, Ġ, 3, 3."""
    pieces = [smollm.id_to_token(i) for i in smollm.encode("a  33 b")]
    assert pieces == ["a", "ĠĠ", "3", "3", "Ġb"]
    tiny = load_tokenizer(write_tiny_gguf(tmp_path / "s.gguf", "smollm", MERGES))
    assert [tiny.id_to_token(i) for i in tiny.encode("x 123")] == ["x", "Ġ", "1", "2", "3"]


def test_control_tokens_are_special(tmp_path):
    tok = load_tokenizer(write_tiny_gguf(tmp_path / "t.gguf", "gpt-2", MERGES))
    ids = tok.encode("a<|im_end|>b")
    assert ids[1] == 2 and len(ids) == 3
    assert tok.decode(ids) == "ab" and tok.decode(ids, skip_special_tokens=False) == "a<|im_end|>b"
    assert tok.eos_token_ids == (2,) and tok.bos_token_id == 1 and not tok.adds_bos


def test_not_a_gguf_or_broken(tmp_path):
    good = write_tiny_gguf(tmp_path / "t.gguf", "gpt-2", MERGES).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[:600])
    with pytest.raises(CheckpointError, match="broken GGUF metadata") as info:
        load_tokenizer(cut)
    assert "\n" not in str(info.value)
    wrong_version = tmp_path / "v9.gguf"
    wrong_version.write_bytes(good[:4] + (9).to_bytes(4, "little") + good[8:])
    with pytest.raises(CheckpointError, match="version 9"):
        load_tokenizer(wrong_version)
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        read_gguf_metadata(_plain_file(tmp_path))


def test_gguf_without_tokenizer(tmp_path):
    import gguf

    path = tmp_path / "bare.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UserError, match="has no tokenizer"):
        load_tokenizer(path)


def _plain_file(tmp_path):
    path = tmp_path / "plain.bin"
    path.write_bytes(b"not a gguf at all, just bytes" * 4)
    return path


def _write_tiny_sentencepiece_gguf(path):
    """A llama.cpp "llama" (SentencePiece) vocabulary: scores, <0xNN> byte tokens, no merges."""
    import gguf

    pieces = ["▁", "▁t", "he", "▁the", "▁a", "in", "▁in", "at", "▁c", "▁cat"]
    letters = list("abcdefghijklmnopqrstuvwxyz")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *letters, *pieces])
    writer.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(letters) + len(pieces)))
    writer.add_token_scores(
        [0.0] * 259 + [-100.0 - i for i in range(len(letters))] + [-float(i) for i in range(len(pieces))]
    )
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_sentencepiece_gguf_goes_through_transformers(tmp_path):
    from transformers import AutoTokenizer

    path = _write_tiny_sentencepiece_gguf(tmp_path / "spm.gguf")
    ours = load_tokenizer(path)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    assert ours.adds_bos and ours.bos_token_id == 1  # llama.cpp's default for SentencePiece files
    for text in ["the cat in a hat", " the  cat", "日本 x"]:
        assert ours.encode(text) == theirs.encode(text)
        assert ours.decode(ours.encode(text)) == theirs.decode(theirs.encode(text), skip_special_tokens=True)
