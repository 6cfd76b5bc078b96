"""The default model's tokenizer against transformers' from the same GGUF."""

from __future__ import annotations

import json
import time

import pytest

from tenor.engine.api import Tokenizer as TokenizerProtocol
from tenor.errors import UserError
from tenor.tokenizer import Tokenizer, TokenizerSpec, load_tokenizer

# No run of spaces before a digit here: there the GGUF conversion in transformers and the
# model's own pre-tokenizer differ (see test_gguf_tokenizer.py).
TEXTS = [
    "Hello world!",
    "naïve café résumé, “quoted” — dash",
    "日本語のテキストと中文，한국어",
    "emoji 🎉🤖👍🏽 family 👨‍👩‍👧 flag 🇫🇷",
    "line one\nline two\r\n\ttabbed\n\n",
    "<|im_start|>user\nhi there<|im_end|>\n",
    "  leading spaces and trailing  ",
    "x = 3.14159 * 2024; I'm sure we'll see",
    "",
    "\u00a0nbsp and \u200bzero width",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a color 🎨"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?"},
    ],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!\nHow can I help?"}],
]


def test_encode_matches_transformers(smollm, hf_smollm):
    for text in TEXTS:
        assert smollm.encode(text) == hf_smollm.encode(text), text
        assert smollm.encode(text, add_special_tokens=False) == hf_smollm.encode(text, add_special_tokens=False)


def test_decode_matches_transformers(smollm, hf_smollm):
    for text in TEXTS:
        ids = hf_smollm.encode(text)
        assert (
            smollm.decode(ids)
            == hf_smollm.decode(ids, skip_special_tokens=True)
            == text.replace("<|im_start|>", "").replace("<|im_end|>", "")
        )
        assert smollm.decode(ids, skip_special_tokens=False) == hf_smollm.decode(ids, skip_special_tokens=False)


def test_special_ids_of_smollm(smollm):
    assert smollm.eos_token_ids == (2,)  # <|im_end|>
    assert smollm.bos_token_id == 1
    assert smollm.vocab_size == 49152
    assert not smollm.adds_bos  # SmolLM2 adds no BOS
    assert smollm.id_to_token(2) == "<|im_end|>" and smollm.token_to_id("<|im_end|>") == 2
    assert smollm.id_to_token(49152) is None
    assert smollm.is_special(0) and not smollm.is_special(100)
    assert isinstance(smollm, TokenizerProtocol)


def test_chat_template_matches_transformers(smollm, hf_smollm):
    for messages in CONVERSATIONS:
        for generation_prompt in (True, False):
            ours = smollm.apply_chat_template(messages, add_generation_prompt=generation_prompt)
            theirs = hf_smollm.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
            assert ours == theirs
        theirs_ids = hf_smollm.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert smollm.encode_chat(messages) == list(theirs_ids)
    assert smollm.apply_chat_template(CONVERSATIONS[0]).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "messages, fragment",
    [
        ("hello", "must be a list"),
        ({"role": "user", "content": "x"}, "must be a list"),
        ([], "must not be empty"),
        ([{"role": "user"}], "has no 'content'"),
        ([{"content": "x"}], "has no 'role'"),
        ([{"role": "user", "content": None}], "messages[0].content must be a string"),
        ([{"role": "user", "content": [{"type": "text", "text": "x"}]}], "must be a string"),
        ([{"role": "", "content": "x"}], "role must not be empty"),
        (["user: x"], "must be an object"),
    ],
)
def test_malformed_messages_are_one_line_user_errors(smollm, messages, fragment):
    with pytest.raises(UserError) as info:
        smollm.apply_chat_template(messages)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_template_errors_and_missing_template(smollm):
    backend = smollm.backend
    strict = Tokenizer(
        backend,
        TokenizerSpec(
            eos_token="<|im_end|>",
            chat_template="{% if messages[0]['role'] != 'user' %}"
            "{{ raise_exception('Conversation must\nstart with user') }}"
            "{% endif %}{{ messages[0]['content'] }}",
        ),
    )
    assert strict.apply_chat_template([{"role": "user", "content": "ok"}]) == "ok"
    with pytest.raises(UserError, match="rejected the messages: Conversation must start with user"):
        strict.apply_chat_template([{"role": "assistant", "content": "x"}])
    sandboxed = Tokenizer(backend, TokenizerSpec(chat_template="{{ messages.__class__.__mro__ }}"))
    with pytest.raises(UserError, match="rejected"):
        sandboxed.apply_chat_template([{"role": "user", "content": "x"}])
    broken = Tokenizer(backend, TokenizerSpec(chat_template="{% for m in messages %}"))
    with pytest.raises(UserError, match="does not compile"):
        broken.apply_chat_template([{"role": "user", "content": "x"}])
    plain = Tokenizer(backend, TokenizerSpec(eos_token="<|im_end|>"))
    with pytest.raises(UserError, match="no chat template"):
        plain.apply_chat_template([{"role": "user", "content": "x"}])
    assert plain.encode("still encodes") == smollm.encode("still encodes")


def test_bad_encode_and_decode_input(smollm):
    with pytest.raises(UserError, match="must be a string"):
        smollm.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="integers"):
        smollm.decode([5, -1])
    with pytest.raises(UserError, match="integers"):
        smollm.decode([5, 1.5])  # type: ignore[list-item]
    assert smollm.decode([6004, 10**6]) == smollm.decode([6004])  # past the vocabulary: nothing, as in HF
    import numpy as np

    assert smollm.decode(np.array([19556, 905])) == "Hello world"  # numpy ints are ints too


def test_save_and_load_round_trip(smollm, tmp_path):
    smollm.save(tmp_path / "tok")
    again = load_tokenizer(tmp_path / "tok")
    for text in [*TEXTS, "a  33 b"]:
        assert again.encode(text) == smollm.encode(text)
    ids = smollm.encode(TEXTS[3])
    assert again.decode(ids) == smollm.decode(ids)
    assert again.chat_template == smollm.chat_template
    assert again.eos_token_ids == smollm.eos_token_ids and again.bos_token_id == smollm.bos_token_id
    assert again.apply_chat_template(CONVERSATIONS[1]) == smollm.apply_chat_template(CONVERSATIONS[1])


def test_saved_files_load_in_transformers(smollm, hf_smollm, tmp_path):
    from transformers import AutoTokenizer

    smollm.save(tmp_path)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in TEXTS:
        assert theirs.encode(text) == smollm.encode(text)
    assert theirs.eos_token_id == 2 and theirs.bos_token == "<|im_start|>"
    assert theirs.apply_chat_template(
        CONVERSATIONS[1], tokenize=False, add_generation_prompt=True
    ) == smollm.apply_chat_template(CONVERSATIONS[1])


def test_hf_directory_saved_by_transformers(hf_smollm, tmp_path):
    hf_smollm.save_pretrained(str(tmp_path))
    ours = load_tokenizer(tmp_path)
    for text in [*TEXTS, "a  33 b"]:  # the same tokenizer.json: equal everywhere
        assert ours.encode(text) == hf_smollm.encode(text)
    assert ours.eos_token_ids == (2,)
    assert ours.apply_chat_template(CONVERSATIONS[2]) == hf_smollm.apply_chat_template(
        CONVERSATIONS[2], tokenize=False, add_generation_prompt=True
    )


def test_hf_directory_extras(smollm, tmp_path):
    """generation_config.json stop ids; special_tokens_map.json in older directories;
    a chat template in tokenizer_config.json when there is no chat_template.jinja."""
    smollm.save(tmp_path)
    (tmp_path / "chat_template.jinja").unlink()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": "{{ messages[0]['content'] }}!"}]
    del config["eos_token"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "<|endoftext|>"}}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0, 99999]}))
    tok = load_tokenizer(tmp_path)
    assert tok.eos_token_ids == (0, 2)  # the map's eos first, then generation's (in range)
    assert tok.apply_chat_template([{"role": "user", "content": "hey"}]) == "hey!"


def test_gguf_loads_fast(gguf_path):
    started = time.perf_counter()
    load_tokenizer(gguf_path)
    assert time.perf_counter() - started < 3.0
