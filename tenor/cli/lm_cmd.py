"""`tenor lm.generate` and `tenor lm.score`: saxutil's LM verbs and output shapes.

tenor lm.generate [-n N] [--stream] [--extra k:v,...] MODEL QUERY   -> GENERATE | SCORE table
tenor lm.score [--extra k:v,...] MODEL PREFIX SUFFIX...            -> SUFFIX | SCORE table
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from tenor.cli.credential_flags import add_credential_flags, credentials_from
from tenor.cli.table import render_table
from tenor.client.client import ClientOptions, ExtraValue, LanguageModel, Model, Sample, StreamItem
from tenor.errors import UserError

DEFAULT_TIMEOUT_S = 60.0  # saxutil's --sax_timeout


def register(subparsers: argparse._SubParsersAction) -> None:
    generate = subparsers.add_parser("lm.generate", help="generate text with a published language model")
    _common_flags(generate)
    generate.add_argument("-n", type=int, default=1, metavar="N", help="number of samples (default 1)")
    generate.add_argument("--stream", action="store_true", help="print the text as it is generated")
    generate.add_argument("model", metavar="MODEL", help="/tenor/<cell>/<model>")
    generate.add_argument("query", metavar="QUERY", help="the prompt; '-' reads it from stdin")
    generate.set_defaults(func=_generate)

    score = subparsers.add_parser("lm.score", help="score suffixes after a prefix with a published language model")
    _common_flags(score)
    score.add_argument("model", metavar="MODEL", help="/tenor/<cell>/<model>")
    score.add_argument("prefix", metavar="PREFIX")
    score.add_argument("suffixes", metavar="SUFFIX", nargs="+")
    score.set_defaults(func=_score)


def _common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help="cell root, file://DIR or etcd://HOST:PORT[/prefix] (default: $TENOR_ROOT)")
    parser.add_argument(
        "--extra",
        default="",
        metavar="K:V,...",
        help='extra inputs, e.g. "temperature:0.5,per_example_max_decode_steps:16"; quoted values are strings',
    )
    parser.add_argument(
        "--addresses",
        default="",
        metavar="HOST:PORT,...",
        help="call these model servers directly instead of asking the cell's admin",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds for the whole call, retries included (default {DEFAULT_TIMEOUT_S:g})",
    )
    add_credential_flags(parser)


def parse_extra(text: str) -> dict[str, ExtraValue]:
    """saxutil's -extra syntax: "k:v,k:v"; numbers are items, quoted or other values strings."""
    extra: dict[str, ExtraValue] = {}
    if not text:
        return extra
    for pair in text.split(","):
        parts = pair.split(":")
        if len(parts) != 2 or not parts[0]:
            raise UserError(f"--extra pairs must look like key:value, got {pair!r} in {text!r}")
        key, value = parts
        if len(value) >= 2 and value[0] in "\"'" and value[0] == value[-1]:
            extra[key] = value[1:-1]
            continue
        try:
            extra[key] = float(value)
        except ValueError:
            extra[key] = value
    return extra


def format_score(score: float) -> str:
    """Go's strconv.FormatFloat(score, 'G', 8, 64), as saxutil prints scores."""
    return f"{score:.8G}"


def generate_table(samples: Sequence[Sample]) -> str:
    ranked = sorted(samples, key=lambda s: s.score, reverse=True)
    return render_table(["generate", "score"], [[s.text, format_score(s.score)] for s in ranked], right_aligned=[1])


def score_table(suffixes: Sequence[str], logps: Sequence[float]) -> str:
    return render_table(["suffix", "score"], [[s, format_score(p)] for s, p in zip(suffixes, logps)], right_aligned=[1])


def _open(args: argparse.Namespace) -> Model:
    from tenor.admin.naming import parse_model_name
    from tenor.client.admin_client import resolve_root

    parse_model_name(args.model)  # a malformed name is an error before the root is even read
    if args.timeout <= 0:
        raise UserError(f"--timeout must be > 0, got {args.timeout}")
    addresses = tuple(a for a in args.addresses.split(",") if a)
    root = args.root if addresses else resolve_root(args.root)  # with addresses, the root only holds the token
    return Model(
        args.model,
        ClientOptions(timeout_s=args.timeout, root=root, addresses=addresses, credentials=credentials_from(args)),
    )


def _generate(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise UserError(f"-n must be at least 1, got {args.n}")
    extra = parse_extra(args.extra)
    if args.n > 1:
        extra["num_samples"] = args.n
    query = sys.stdin.read() if args.query == "-" else args.query
    with _open(args) as model:
        lm = model.lm()
        if args.stream:
            print_stream(lm, query, extra, sys.stdout)
        else:
            print(generate_table(lm.generate(query, extra)))
    return 0


def print_stream(lm: LanguageModel, query: str, extra: dict[str, ExtraValue], out: TextIO) -> None:
    """One sample: its text as it comes. Several: each final text, a blank line apart.
    Then the scores, as saxutil does."""
    texts: list[str] = []
    scores: list[float] = []
    for items in lm.generate_stream(query, extra):
        _grow(texts, scores, items)
        for i, item in enumerate(items):
            if len(items) == 1 and item.prefix_len == len(texts[0]):
                out.write(item.text)
                out.flush()
            elif len(items) == 1:  # the server rewrote earlier text: show the whole of it again
                out.write("\n" + texts[0][: item.prefix_len] + item.text)
            texts[i] = texts[i][: item.prefix_len] + item.text
            scores[i] = item.scores[-1] if item.scores else scores[i]
    if len(texts) == 1:
        out.write("\n\n")
    else:
        out.write("".join(text + "\n\n" for text in texts))
    label = "Score" if len(scores) == 1 else "Scores"
    out.write(f"{label}: {', '.join(format_score(s) for s in scores)}\n")


def _grow(texts: list[str], scores: list[float], items: Sequence[StreamItem]) -> None:
    while len(texts) < len(items):
        texts.append("")
        scores.append(0.0)


def _score(args: argparse.Namespace) -> int:
    extra = parse_extra(args.extra)
    with _open(args) as model:
        logps = model.lm().score(args.prefix, args.suffixes, extra)
    print(score_table(args.suffixes, logps))
    return 0
