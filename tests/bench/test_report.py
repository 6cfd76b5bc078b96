import json

from tenor.bench.metrics import RequestRecord, summarize
from tenor.bench.report import BenchReport, RunInfo, format_table, to_json_dict, write_json


def _report(records):
    run = RunInfo(
        "http://x", "m", "completions", "closed loop, concurrency 1", 2, 8, 0, False, None, "2026-01-01T00:00:00+00:00"
    )
    return BenchReport(run, summarize(records, 2.0))


def test_table_shows_metrics_and_errors():
    ok = RequestRecord(True, "", 1.0, 0.25, (0.25, 0.25), 3, 4, "usage")
    bad = RequestRecord(False, "HTTP 503: busy", 0.1, None, (), 0, None, "chunks")
    table = format_table(_report([ok, bad]))
    assert "1 ok, 1 failed" in table
    assert "TTFT" in table and "250.0" in table
    assert "1 x HTTP 503: busy" in table


def test_table_and_json_survive_a_run_with_nothing_completed(tmp_path):
    report = _report([RequestRecord(False, "timeout after 1 s", 1.0, None, (), 0, None, "chunks")])
    assert "-" in format_table(report)
    path = tmp_path / "out.json"
    write_json(report, path)
    data = json.loads(path.read_text())
    assert data == json.loads(json.dumps(to_json_dict(report)))
    assert data["summary"]["ttft"]["p50_ms"] is None
    assert data["summary"]["errors"] == [{"message": "timeout after 1 s", "count": 1}]
    assert data["summary"]["output_tokens_counted_from"] == "none"
