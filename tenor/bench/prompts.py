"""The benchmark's prompt set: varied English prose, 40-300 words, made from a seed.

Made in code rather than downloaded so every machine and every run sends the same bytes
(no network, nothing to license). Each prompt is an instruction followed by a passage
assembled from hand-written sentence parts on one of several topics.
"""

from __future__ import annotations

import random
from pathlib import Path

from tenor.errors import UserError

MIN_WORDS = 40
MAX_WORDS = 300

_INSTRUCTIONS = (
    "Summarize the following passage in a few sentences.",
    "Continue this text in the same style.",
    "Explain the main idea of this passage to a curious teenager.",
    "List three questions a reader might ask after reading this.",
    "Rewrite the following notes as a short, friendly letter.",
    "What is the author worried about in this passage? Answer briefly.",
    "Give this passage a title and explain your choice.",
    "Point out any claims in this passage that would need evidence.",
)

# topic -> (subjects, actions, objects, settings); every combination reads as English.
_TOPICS: dict[str, tuple[tuple[str, ...], ...]] = {
    "kitchen": (
        ("the baker", "my grandmother", "a young cook", "the night-shift chef", "our neighbour"),
        ("slowly folded", "carefully weighed", "tasted and adjusted", "left to rest", "burned"),
        ("the sourdough", "a pot of lentil soup", "the lemon tart", "fresh tomatoes", "the spices"),
        ("before sunrise", "in a narrow kitchen", "while the radio played", "on a cold Sunday"),
    ),
    "sea": (
        ("the old sailor", "a marine biologist", "the harbour master", "two fishermen", "the crew"),
        ("measured", "photographed", "followed for hours", "mapped by hand", "argued about"),
        ("the tide", "a school of mackerel", "the broken buoy", "a pod of dolphins", "the reef"),
        ("beyond the breakwater", "under a grey sky", "at the edge of the shelf", "after the storm"),
    ),
    "city": (
        ("the council", "a bus driver", "the shopkeepers", "an urban planner", "the commuters"),
        ("debated", "redesigned", "complained about", "finally repaired", "counted"),
        ("the bicycle lanes", "the night market", "the leaking water mains", "the new tram line"),
        ("near the station", "in the old quarter", "during rush hour", "for the third year running"),
    ),
    "science": (
        ("the graduate student", "a small team", "the lab technician", "the reviewer", "a chemist"),
        ("replicated", "questioned", "carefully calibrated", "plotted", "could not explain"),
        ("the experiment", "an odd spike in the data", "the control group", "the thermometer"),
        ("late into the night", "with borrowed equipment", "against the deadline", "twice more"),
    ),
    "garden": (
        ("the gardener", "my brother", "a retired teacher", "the volunteers", "the children"),
        ("pruned", "watered", "moved into the shade", "protected from frost", "planted"),
        ("the apple trees", "a row of beans", "the climbing roses", "the herb bed", "seedlings"),
        ("in early spring", "behind the library", "after a dry summer", "by the north wall"),
    ),
    "workshop": (
        ("the carpenter", "an apprentice", "the engineer", "a clockmaker", "the repair crew"),
        ("sanded", "took apart", "rebuilt", "oiled and tested", "sketched"),
        ("the oak table", "a stubborn gearbox", "the bridge model", "an antique clock", "the pump"),
        ("in a dusty shed", "under a single lamp", "without the manual", "over a long weekend"),
    ),
}

_CONNECTORS = (
    "Afterwards,",
    "Meanwhile,",
    "For a while,",
    "Surprisingly,",
    "In the end,",
    "Later,",
    "Even so,",
    "At first,",
    "By then,",
    "Once again,",
)

_REFLECTIONS = (
    "Nobody could say exactly why it mattered so much, but everyone felt it did.",
    "It was the kind of small decision that only looks important years later.",
    "Some people called it a waste of time, while others quietly took notes.",
    "The result was not perfect, yet it was better than anything tried before.",
    "There were doubts, of course, and they were written down in a battered notebook.",
    "It took patience, a little luck and more coffee than anyone wants to admit.",
    "Looking back, the mistakes taught more than the successes ever did.",
    "The question of cost came up again, and again nobody had a clear answer.",
)


def _sentence(rng: random.Random, topic: tuple[tuple[str, ...], ...]) -> str:
    subjects, actions, objects, settings = topic
    if rng.random() < 0.25:
        return rng.choice(_REFLECTIONS)
    subject = rng.choice(subjects)
    body = f"{subject} {rng.choice(actions)} {rng.choice(objects)} {rng.choice(settings)}."
    body = body[0].upper() + body[1:]
    if rng.random() < 0.4:
        body = f"{rng.choice(_CONNECTORS)} {body[0].lower()}{body[1:]}"
    return body


def _word_count(text: str) -> int:
    return len(text.split())


def _one_prompt(rng: random.Random, min_words: int, max_words: int) -> str:
    topic = _TOPICS[rng.choice(sorted(_TOPICS))]
    target = rng.randint(min_words, max_words)
    parts = [rng.choice(_INSTRUCTIONS)]
    words = _word_count(parts[0])
    while True:
        sentence = _sentence(rng, topic)
        grown = words + _word_count(sentence)
        if grown > max_words or (words >= min_words and grown > target):
            break
        parts.append(sentence)
        words = grown
    return " ".join(parts)


def make_prompts(count: int, seed: int = 0, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS) -> list[str]:
    """`count` prose prompts of min_words..max_words words; the same seed gives the same list."""
    if count < 1:
        raise ValueError(f"the prompt count must be at least 1, got {count}")
    if not 20 <= min_words <= max_words:
        raise ValueError(f"need 20 <= min_words <= max_words, got {min_words} and {max_words}")
    rng = random.Random(seed)
    return [_one_prompt(rng, min_words, max_words) for _ in range(count)]


def load_prompts(path: str | Path, count: int) -> list[str]:
    """Prompts from a text file, one per blank-line-separated block, cycled up to `count`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the prompts file {path}: {exc.strerror}") from None
    blocks = [" ".join(block.split()) for block in text.split("\n\n")]
    prompts = [block for block in blocks if block]
    if not prompts:
        raise UserError(f"the prompts file {path} holds no prompts (separate them with blank lines)")
    return [prompts[i % len(prompts)] for i in range(count)]
