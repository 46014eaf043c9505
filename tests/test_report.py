"""benchmarks/report.py: the benchmark picture from pytest-benchmark JSON (the mechanics, on
a small hand-written file; the real picture is docs/benchmark_report.png)."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import report


def _file(tmp_path, benchmarks):
    path = tmp_path / "bench.json"
    path.write_text(
        json.dumps(
            {
                "machine_info": {"cpu": {"brand_raw": "Test CPU", "count": 2}},
                "datetime": "2026-11-30T12:00:00",
                "benchmarks": benchmarks,
            }
        )
    )
    return path


def test_renders_verify_and_generation_panels(tmp_path, capsys):
    verify = [
        {
            "name": f"bench_verify[real-k{k}-threads-default]",
            "extra_info": {
                "input": "real",
                "dtype": "float32",
                "params": "greedy",
                "vocab": 151936,
                "k": k,
                "verify_over_read_pass": 1.2,
                "chain_over_verify": 20.0,
            },
        }
        for k in (1, 4, 8)
    ]
    verify.append(
        {
            "name": "bench_verify[real-k4-threads-1]",  # one thread: not plotted
            "extra_info": {"verify_over_read_pass": 3.0, "vocab": 151936, "k": 4},
        }
    )
    gen = [
        {
            "name": "bench_generation[qwen-edit]",
            "extra_info": {"plain_tok_s": 9.0, "spec_tok_s": 18.0, "acceptance": 0.9},
        }
    ]
    out = tmp_path / "r.png"
    assert report.main([str(_file(tmp_path, verify + gen)), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "3 verify points, 1 generation cases" in capsys.readouterr().out
    assert len(report.verify_points(verify)) == 3
    assert report.generation_points(gen) == [("generation[qwen-edit]", 9.0, 18.0, 0.9)]


def test_files_without_figures_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="no verify ratios or generation rates"):
        report.main(
            [
                str(_file(tmp_path, [{"name": "bench_other", "extra_info": {}}])),
                "-o",
                str(tmp_path / "r.png"),
            ]
        )


def test_files_without_figures_write_nothing_when_allowed(tmp_path, capsys):
    """pyspec bench passes --allow-empty: suites whose numbers are tables (logprobs, graph)
    succeed without a picture."""
    out = tmp_path / "r.png"
    assert (
        report.main(
            [
                str(_file(tmp_path, [{"name": "bench_other", "extra_info": {}}])),
                "-o",
                str(out),
                "--allow-empty",
            ]
        )
        == 0
    )
    assert not out.exists() and "nothing to plot" in capsys.readouterr().out


def test_case_labels_and_the_draftless_panel(tmp_path, capsys):
    assert report.case_label("bench_generation[qwen-lookup-edit-t0.8]") == (
        "Qwen 1.5B, lookup, edit, T 0.8"
    )
    assert report.case_label("bench_generation[qwen-qwen-0.5b-free-t0.0]") == (
        "Qwen 1.5B, 0.5B draft, free, greedy"
    )
    assert report.case_label("server[repeat-completion]") == "repeat-completion"
    summary = {
        "chat": {"requests": 8, "rate": {"plain": 8.0, "lookup": 10.0, "c++ ngram-cache": 12.0}},
        "code edits": {"requests": 5, "rate": {"plain": 0.0, "lookup": 1.0}},  # no plain: left out
    }
    draftless = [{"name": "bench_draftless_modes", "extra_info": {"summary": summary}}]
    assert report.draftless_points(draftless) == [
        ("chat (8)", {"lookup": 1.25, "c++ ngram-cache": 1.5})
    ]
    out = tmp_path / "d.png"
    assert report.main([str(_file(tmp_path, draftless)), "-o", str(out)]) == 0
    assert "1 draftless workloads" in capsys.readouterr().out
