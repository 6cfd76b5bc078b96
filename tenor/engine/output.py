"""Turns one sample's new tokens into text deltas: incremental detokenization, stop token
ids, end-of-sequence and stop strings (text held back while it could still become one)."""

from __future__ import annotations

from dataclasses import dataclass

from tenor.engine.api import FinishReason, SamplingParams, Tokenizer


@dataclass
class TextDelta:
    text: str
    finish_reason: FinishReason | None


class SampleText:
    def __init__(
        self, tokenizer: Tokenizer, sampling: SamplingParams, eos_token_ids: tuple[int, ...], max_target_length: int
    ) -> None:
        from tenor.tokenizer import IncrementalDetokenizer

        self._detok = IncrementalDetokenizer(tokenizer)
        self._sampling = sampling
        self._stop_ids = set(sampling.stop_token_ids)
        if not sampling.ignore_eos:
            self._stop_ids.update(eos_token_ids)
        self._max_target_length = max_target_length
        self._held = ""  # text that might be the start of a stop string
        self._hold = max((len(s) for s in sampling.stop), default=1) - 1
        self.num_tokens = 0

    def add(self, token_id: int, total_length: int) -> TextDelta:
        """Feeds one generated token; `total_length` is prompt + output tokens so far."""
        self.num_tokens += 1
        if token_id in self._stop_ids:
            return TextDelta(self._release_all(), FinishReason.STOP)
        text = self._held + self._detok.add([token_id])
        for stop in self._sampling.stop:
            cut = text.find(stop)
            if cut >= 0:
                self._held = ""
                return TextDelta(text[:cut], FinishReason.STOP)
        if self.num_tokens >= self._sampling.max_tokens or total_length >= self._max_target_length:
            self._held = ""
            return TextDelta(text + self._detok.flush(), FinishReason.LENGTH)
        if self._hold:
            keep = _stop_prefix_length(text, self._sampling.stop, self._hold)
            self._held = text[len(text) - keep :] if keep else ""
            text = text[: len(text) - keep]
        return TextDelta(text, None)

    def _release_all(self) -> str:
        text, self._held = self._held + self._detok.flush(), ""
        return text

    def abort(self) -> TextDelta:
        return TextDelta(self._release_all(), FinishReason.ABORT)


def _stop_prefix_length(text: str, stops: tuple[str, ...], hold: int) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some stop string."""
    for n in range(min(hold, len(text)), 0, -1):
        tail = text[-n:]
        if any(s.startswith(tail) for s in stops):
            return n
    return 0
