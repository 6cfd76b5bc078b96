import pytest

from benchmarks.run_serving_comparison import Point, Row, comparison_markdown, main
from tenor.bench.metrics import RequestRecord, summarize


def _summary(tokens_per_request: int, latency_s: float):
    record = RequestRecord(True, "", latency_s, 0.1, (0.05,) * (tokens_per_request - 1), tokens_per_request, 5, "usage")
    return summarize([record, record], duration_s=2.0)


def test_points_parse_and_reject_garbage():
    assert Point.parse("32:64") == Point(32, 64)
    for bad in ("32", "a:b", "0:8"):
        with pytest.raises(ValueError):
            Point.parse(bad)


def test_the_table_gives_ratios_against_llama_cpp():
    point = Point(32, 64)
    rows = [
        Row("llama.cpp", point, _summary(100, 2.0)),
        Row("tenor", point, _summary(150, 2.0)),
        Row("hf", point, None, "did not start"),
    ]
    table = comparison_markdown(rows)
    llama_line = next(line for line in table.splitlines() if line.startswith("| llama.cpp"))
    tenor_line = next(line for line in table.splitlines() if line.startswith("| tenor"))
    assert "| 1.00x |" in llama_line
    assert "| 1.50x |" in tenor_line  # 150 vs 100 output tokens per second
    assert "| hf | did not start |" in table
    assert "concurrency 32, 64 prompts" in table


def test_bad_arguments_exit_2_before_starting_anything(capsys):
    assert main(["--points", "7"]) == 2
    assert "CONCURRENCY:NUM_PROMPTS" in capsys.readouterr().err
    assert main(["--servers", "vllm"]) == 2
