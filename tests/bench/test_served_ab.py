import sys
from pathlib import Path

import pytest

from benchmarks import served_ab
from benchmarks.peer_servers import RunningServer, ServerSpec


def test_a_spec_sets_its_environment_over_ours(tmp_path):
    out = tmp_path / "seen"
    write = (
        "import os, pathlib; pathlib.Path(os.environ['SEEN']).write_text(os.environ['TENOR_AB'] + os.environ['HOME'])"
    )
    spec = ServerSpec("env", (sys.executable, "-c", write), "/", env=(("TENOR_AB", "set"), ("SEEN", str(out))))
    server = RunningServer(spec, tmp_path / "env.log")
    assert server.process.wait(20) == 0
    assert out.read_text().startswith("set") and len(out.read_text()) > 3  # PATH still inherited


def test_the_base_runs_its_own_tree_and_only_the_new_side_gets_the_setting(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(served_ab, "default_gguf_path", lambda: gguf)
    specs = served_ab.tenor_specs(tmp_path / "base", as_cpu="avx2", new_env=["GOMP_SPINCOUNT=10000"])
    assert specs["base"].argv[1] == str(tmp_path / "base" / "benchmarks" / "cpu_proxy.py")
    assert specs["new"].argv[1] == str(Path(served_ab.__file__).parent / "cpu_proxy.py")
    assert specs["base"].env == (("PYTHONPATH", str(tmp_path / "base")),)
    assert specs["new"].env == (("GOMP_SPINCOUNT", "10000"),)
    assert specs["base"].argv[2:] == specs["new"].argv[2:]  # the same flags and model


@pytest.mark.parametrize("as_cpu", [None, "avx2"])
def test_the_base_side_imports_the_base_trees_tenor(tmp_path, monkeypatch, as_cpu):
    """Started from the repository's root, as the benchmark is: `python -m` puts the folder a
    process starts in first on sys.path, so the base must start in its own tree."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(served_ab, "default_gguf_path", lambda: gguf)
    monkeypatch.chdir(served_ab.REPO)
    base, seen = tmp_path / "base", tmp_path / "seen"
    report = f"import tenor, pathlib; pathlib.Path({str(seen)!r}).write_text(tenor.__file__)\n"
    for module in ("tenor/__init__.py", "tenor/cli/__init__.py", "benchmarks/__init__.py"):
        (base / module).parent.mkdir(parents=True, exist_ok=True)
        (base / module).write_text("")
    (base / "tenor/cli/main.py").write_text(report)
    (base / "benchmarks/cpu_proxy.py").write_text(report)
    specs = served_ab.tenor_specs(base, as_cpu=as_cpu)
    assert RunningServer(specs["base"], tmp_path / "base.log").process.wait(60) == 0
    assert seen.read_text() == str(base / "tenor" / "__init__.py")


@pytest.mark.parametrize("argv", [["--base", "HEAD", "--rounds", "0"], ["--base", "HEAD", "--new-env", "NOEQUALS"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        served_ab._parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--rounds must be at least 1" in err or "--new-env takes KEY=VALUE" in err


def test_an_unknown_base_is_one_line_and_exit_2(tmp_path, capsys):
    assert served_ab.main(["--base", "no-such-revision-xyz", "--out-dir", str(tmp_path)]) == 2
    assert "git archive no-such-revision-xyz" in capsys.readouterr().err
