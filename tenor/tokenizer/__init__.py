"""Tokenizers: text <-> token ids, chat templates, streaming detokenization.

    tok = load_tokenizer(path)          # tenor checkpoint / HF directory, or a .gguf file
    ids = tok.encode_chat([{"role": "user", "content": "Hi"}])
    detok = IncrementalDetokenizer(tok, prompt_ids=ids)
    for step_ids in generated: print(detok.add(step_ids), end="")
    print(detok.flush())

Random-weight test models use byte_tokenizer() (UTF-8 bytes as ids).
"""

from tenor.tokenizer.byte_tokenizer import Utf8ByteTokenizer, byte_tokenizer
from tenor.tokenizer.detokenizer import IncrementalDetokenizer
from tenor.tokenizer.loader import load_tokenizer
from tenor.tokenizer.spec import TokenizerSpec
from tenor.tokenizer.token_ids import format_token_ids, parse_token_ids
from tenor.tokenizer.tokenizer import Tokenizer

__all__ = [
    "IncrementalDetokenizer",
    "Tokenizer",
    "TokenizerSpec",
    "Utf8ByteTokenizer",
    "byte_tokenizer",
    "format_token_ids",
    "load_tokenizer",
    "parse_token_ids",
]
