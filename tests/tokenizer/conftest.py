"""Shared tokenizers for the tokenizer tests: the default model's (ours and transformers'
from the same GGUF, loaded once per session), a tiny SentencePiece-style one, tiny GGUFs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from tenor.checkpoints.default_model import default_gguf_path
from tenor.tokenizer import Tokenizer, TokenizerSpec, load_tokenizer
from tenor.tokenizer.gguf_tokenizer import byte_alphabet

SPM_CORPUS = [
    "Hello world, this is a tiny corpus for a tiny tokenizer.",
    "The quick brown fox jumps over the lazy dog.",
    "Streaming text must keep its spaces between words.",
] * 20


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    try:
        return default_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm(gguf_path: Path) -> Tokenizer:
    return load_tokenizer(gguf_path)


@pytest.fixture(scope="session")
def hf_smollm(gguf_path: Path):
    """transformers' tokenizer from the same GGUF: the reference.

    It is the class AutoTokenizer picks for this file (identical tokenizer.json, special
    tokens and template); asking for it by name skips AutoTokenizer's reading of the
    model config out of the GGUF, which takes 6-10 s here."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    return TokenizersBackend.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)


@pytest.fixture(scope="session")
def spm() -> Tokenizer:
    """Llama-style SentencePiece BPE: '▁' for spaces, <0xNN> byte fallback, BOS added, and a
    decoder that drops the first token's leading space."""
    trained = Backend(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trained.train_from_iterator(
        SPM_CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    )
    spec = json.loads(trained.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):  # byte tokens are ordinary vocabulary entries, as in Llama's
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    backend = Backend.from_str(json.dumps(spec))
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", backend.token_to_id("<s>"))]
    )
    return Tokenizer(backend, TokenizerSpec(bos_token="<s>", eos_token="</s>", unk_token="<unk>"))


def write_tiny_gguf(
    path: Path, pre: str, merges: Sequence[str], kind: str = "gpt2", chat_template: str | None = None
) -> Path:
    """A GGUF with only metadata: a byte-level vocabulary (3 control tokens, the 256 byte
    spellings, one token per merge) and the given merges."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    tokens = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        *byte_alphabet().values(),
        *("".join(m.split(" ")) for m in merges),
    ]
    writer.add_tokenizer_model(kind)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3] * 3 + [1] * (len(tokens) - 3))
    writer.add_token_merges(list(merges))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
