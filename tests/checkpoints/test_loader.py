import dataclasses

import pytest
import torch

from tenor.checkpoints.format import COMMIT_FILE, save_checkpoint
from tenor.checkpoints.loader import checkpoint_kind, load_any
from tenor.errors import CheckpointError
from tenor.registry import TINY_LLAMA
from tests.checkpoints.test_format import random_weights
from tests.checkpoints.tiny_gguf import write_llama_gguf
from tests.checkpoints.tiny_hf import make_llama


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    hf = make_llama(root / "hf", rope=None)
    # Names say nothing: the kind must come from the content.
    write_llama_gguf(root / "model.bin", hf, heads=4, kv_heads=2, ffn=48)
    save_checkpoint(root / "tenor.gguf", TINY_LLAMA, random_weights(TINY_LLAMA))
    return root


@pytest.mark.parametrize("name, kind", [("hf", "hf"), ("model.bin", "gguf"), ("tenor.gguf", "tenor")])
def test_kind_by_content(sources, name, kind):
    assert checkpoint_kind(sources / name) == kind
    loaded = load_any(sources / name)
    assert loaded.kind == kind and loaded.source == str(sources / name)
    assert all(isinstance(t, torch.Tensor) for t in loaded.weights.values())


def test_hf_and_gguf_of_one_model_agree(sources):
    hf, gguf = load_any(sources / "hf"), load_any(sources / "model.bin")
    # The tiny GGUF lists one eos id; the HF config two.
    assert hf.config == dataclasses.replace(gguf.config, eos_token_ids=(2, 3))
    assert list(hf.weights) == list(gguf.weights)
    assert all(torch.equal(hf.weights[n], gguf.weights[n]) for n in hf.weights)


def test_bad_paths(tmp_path):
    with pytest.raises(CheckpointError, match="nope: no such file or directory"):
        load_any(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match=r"notes\.txt: not a GGUF file"):
        load_any(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="empty: neither a tenor checkpoint"):
        load_any(tmp_path / "empty")


def test_half_written_tenor_checkpoint(tmp_path):
    dst = save_checkpoint(tmp_path / "ckpt", TINY_LLAMA, random_weights(TINY_LLAMA))
    (dst / COMMIT_FILE).unlink()
    with pytest.raises(CheckpointError, match="no commit_success.txt; the checkpoint may be half-written"):
        load_any(dst)
