"""deploy/Dockerfile{,.cuda}: parsed with dockerfile-parse, their steps are the README's setup
(`./setup.sh && tenor serve`): the one RUN of the repository's steps is the README's setup
command, and the image's command is the README's serve command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile", "Dockerfile.cuda"]


def readme_quick_start() -> list[list[str]]:
    """The commands of the README's quick-start block, e.g. [['./setup.sh'], ['tenor', 'serve']]."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's quick start has no sh block"
    return [shlex.split(part) for part in block.group(1).strip().split("&&")]


def instructions(name: str) -> list[tuple[str, str]]:
    with open(REPO / "deploy" / name, "rb") as f:
        parser = DockerfileParser(fileobj=f)
        return [(i["instruction"], i["value"]) for i in parser.structure]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_runs_the_readme_setup_then_serves(name) -> None:
    *setup, serve = readme_quick_start()
    steps = instructions(name)
    copied = [i for i, (kind, _) in enumerate(steps) if kind == "COPY"]
    assert copied and steps[copied[0]][1] == ". ."  # the repository, as a clone of it
    # After the repository is in, the RUN steps are exactly the README's setup commands.
    runs = [shlex.split(value) for kind, value in steps[copied[0] :] if kind == "RUN"]
    assert runs == setup
    entrypoint = next(json_list(v) for k, v in steps if k == "ENTRYPOINT")
    command = next(json_list(v) for k, v in steps if k == "CMD")
    # The README's serve command, bound to every interface (a container's port must be reachable).
    assert (entrypoint + command)[: len(serve)] == serve
    assert (entrypoint + command)[len(serve) :] == ["--host", "0.0.0.0"]
    assert ("EXPOSE", "8000") in steps


def json_list(value: str) -> list[str]:
    import json

    return json.loads(value)


def test_the_cuda_image_asks_setup_for_the_cuda_build() -> None:
    env = " ".join(v for k, v in instructions("Dockerfile.cuda") if k == "ENV")
    assert "TENOR_TORCH=cuda" in env
    assert '"${TENOR_TORCH:-}" == "cuda"' in (REPO / "setup.sh").read_text()
    base = next(v for k, v in instructions("Dockerfile.cuda") if k == "FROM")
    assert base.startswith("nvidia/cuda:")


def test_the_tenor_serve_command_in_the_image_parses() -> None:
    from tenor.cli.main import build_parser

    args = json_list(next(v for k, v in instructions("Dockerfile") if k == "CMD"))
    assert build_parser().parse_args(args).host == "0.0.0.0"
