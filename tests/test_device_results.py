"""The device scripts' output kept as one file (benchmarks/device/keep_device_results.py) and
the table made from it (_readme_sections.cuda_device): the files as the scripts write them."""

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS / "device"))

import keep_device_results  # noqa: E402
from _bench_json import MissingResults, Run  # noqa: E402
from _readme_sections import cuda_device  # noqa: E402

ENV = """date: 2026-12-04T15:26:11+00:00
Linux vm 6.18.44 x86_64 GNU/Linux
gpu: NVIDIA H200, 143771 MiB, 580.159.04
host cpu: Intel(R) Xeon(R) Processor; family 6, model 207; 16 CPUs
/usr/local/cuda/bin/nvcc
Cuda compilation tools, release 13.0, V13.0.88
"""
CHECK = {
    "cases": 1200,
    "errors": 0,
    "max_logprob_abs_diff": 2.4e-07,
    "gpu_vs_reference_mismatches (must be 0)": 0,
    "greedy_gpu_vs_cpu_mismatches (must be 0)": 3,
    "mismatches_of_runs": {"f32/point": [0, 100], "bf16/sparse": [0, 100]},
    "mismatches_of_runs_by_params (0 = greedy; all must be 0)": [[0, 120]] * 10,
    "examples": ["status cpu 5 ..."],
}
BENCH = {
    "copy_GBps_read_plus_write": 4269.4,
    "runs": [
        {
            "V": 151936,
            "dtype": "f32",
            "params": "greedy",
            "batch": 64,
            "k": 8,
            "accepted": 512,
            "us_graph_replay": 731.5,
            "us_plain_call": 735.6,
            "logit_bytes": 350060544,
            "GBps": 478.6,
            "fraction_of_copy_bw": 0.112,
        }
    ],
}
PYTEST_XML = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
    '<testsuite name="pytest" errors="0" failures="1" skipped="2" tests="10">'
    '<testcase classname="tests.test_cuda" name="test_a" />'
    '<testcase classname="tests.test_cuda" name="test_b"><failure message="x" /></testcase>'
    "</testsuite></testsuites>"
)


def _checks_dir(tmp_path, with_bench=True):
    d = tmp_path / "checks"
    d.mkdir()
    (d / "env.txt").write_text(ENV)
    (d / "check.json").write_text(json.dumps(CHECK))
    if with_bench:
        (d / "bench.json").write_text(json.dumps(BENCH))
    (d / "pytest.xml").write_text(PYTEST_XML)
    (d / "memcheck.txt").write_text("========= ERROR SUMMARY: 0 errors\n")
    return d


def _render(tmp_path, data) -> str:
    path = tmp_path / "cuda-device.json"
    path.write_text(json.dumps(data))
    return "\n".join(cuda_device(Run("cuda-device", path, data)))


def test_the_kept_file_holds_the_machine_and_every_figure(tmp_path):
    data = keep_device_results.collect(_checks_dir(tmp_path), None)
    assert data["gpu"] == "NVIDIA H200, 143771 MiB, 580.159.04"
    assert data["host_cpu"].startswith("Intel(R) Xeon(R) Processor; family 6, model 207")
    assert data["datetime"] == "2026-12-04T15:26:11+00:00"
    assert data["nvcc"] == "release 13.0, V13.0.88"
    assert "examples" not in data["check"] and data["check"]["cases"] == 1200
    assert data["bench"] == BENCH
    assert data["pytest_test_cuda"] == dict(
        tests=10, failures=1, errors=0, skipped=2, passed=7, failed_tests=["test_b"]
    )
    assert data["memcheck"] == "ERROR SUMMARY: 0 errors"


def test_the_table_shows_mismatches_failures_and_bandwidth(tmp_path):
    text = _render(tmp_path, keep_device_results.collect(_checks_dir(tmp_path), None))
    assert (
        "on an NVIDIA H200 (143771 MiB, driver 580.159.04), CUDA 13.0, host Intel(R) Xeon(R)"
        " Processor (family 6, model 207), 16 CPUs"
        in text
        and "2026-12-04" in text
    )
    assert "1200 random calls" in text and "3 greedy ones from the CPU library" in text
    assert "7 passed, 2 skipped, 1 failed (test_b)" in text
    assert "| 151936 | f32 | greedy | 64 | 8 | 732 us | 479 GB/s | 11.2% |" in text


def test_graph_results_are_summarised_with_their_failures(tmp_path):
    graph = tmp_path / "graph"
    graph.mkdir()
    report = {
        "output_on_gpu": True,
        "rows": {
            "configs": {"greedy": {"rows": 216, "differ": 0, "allowed": 1}},
            "ok": True,
            "no_copy": {"floats_or_ids_kept": 0, "ok": True},
        },
        "generate": {"ok": False},
        "rounds": [{"round_ratio": 0.5}, {"round_ratio": 0.75}],
        "failed": ["generate"],
    }
    (graph / "graph.json").write_text(json.dumps(report))
    data = keep_device_results.collect(_checks_dir(tmp_path), graph)
    text = _render(tmp_path, data)
    assert "greedy 0 of 216 rows differ" in text and "DIFFERENT from the host's" in text
    assert "0.50-0.75x" in text and "Failed: generate." in text


def test_a_run_without_check_or_bench_is_refused(tmp_path):
    with pytest.raises(MissingResults):
        _render(tmp_path, {"suite": "cuda-device", "gpu": "x"})


def test_a_folder_that_is_not_the_scripts_output_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        keep_device_results.main([str(tmp_path)])


def test_a_paired_before_and_after_gives_medians_and_the_speed_up(tmp_path):
    paired = tmp_path / "paired"
    paired.mkdir()
    for name, us in (("old1", 700.0), ("new1", 300.0), ("old2", 760.0), ("new2", 280.0)):
        run = dict(BENCH["runs"][0], us_graph_replay=us)
        (paired / f"{name}.json").write_text(json.dumps(dict(BENCH, runs=[run])))
    data = keep_device_results.collect(_checks_dir(tmp_path), None, paired)
    assert [r[0]["us_graph_replay"] for r in data["bench_paired"]["before"]] == [700.0, 760.0]
    text = _render(tmp_path, data)
    # medians: before 730, after 290; the bandwidth is the after median's
    assert "| 290 us | 1207 GB/s | 28.3% | 730 us, 2.52x |" in text
    assert "medians of 2 runs of each" in text


def test_a_paired_run_says_which_build_and_setting_each_side_is(tmp_path):
    paired = tmp_path / "paired"
    paired.mkdir()
    for name in ("old1", "new1"):
        (paired / f"{name}.json").write_text(json.dumps(BENCH))
    (paired / "sides.txt").write_text(
        "before: this build, split rows off\nafter: this build, split rows on\n"
    )
    data = keep_device_results.collect(_checks_dir(tmp_path), None, paired)
    assert data["bench_paired"]["before_is"] == "this build, split rows off"
    text = _render(tmp_path, data)
    assert (
        "the last column, this build, split rows off and the speed-up of this build, "
        "split rows on, medians of 1 runs" in text
    )


def test_top_p_alone_rows_are_named_and_left_out_of_the_status_sentence(tmp_path):
    from _readme_sections import cuda_device_speed

    runs = []
    for params, us in (("greedy", 40.0), ("top_k40_top_p0.95_min_p0.05_T0.8", 250.0)):
        for batch in (1, 64):
            runs.append(dict(BENCH["runs"][0], params=params, batch=batch, us_graph_replay=us))
    runs.append(dict(runs[0], params="top_p0.9_T1.2", us_graph_replay=9000.0))
    data = keep_device_results.collect(_checks_dir(tmp_path), None)
    data["bench"] = dict(BENCH, runs=runs)
    table = _render(tmp_path, data)
    assert "top-p alone: temperature 1.2, top-p 0.9, no top-k" in table
    assert "| 151936 | f32 | top-p alone | 1 | 8 | 9000 us |" in table
    path = tmp_path / "speed.json"
    path.write_text(json.dumps(data))
    sentence = "\n".join(cuda_device_speed(Run("cuda-device", path, data)))
    assert "takes 40 us greedy and 250 us sampled" in sentence


def test_a_paired_folder_must_hold_both_sides(tmp_path):
    paired = tmp_path / "paired"
    paired.mkdir()
    (paired / "old1.json").write_text(json.dumps(BENCH))
    with pytest.raises(SystemExit):
        keep_device_results.collect(_checks_dir(tmp_path), None, paired)


def test_the_status_sentence_comes_from_the_same_file(tmp_path):
    from _readme_sections import cuda_device_speed

    def batch_1(params, us):  # two rows of Qwen's vocabulary, f32
        two_rows = 2 * 151936 * 4
        return dict(
            BENCH["runs"][0], batch=1, k=1, params=params, us_graph_replay=us, logit_bytes=two_rows
        )

    runs = [batch_1("greedy", 44.0), batch_1("top_k40", 261.0), BENCH["runs"][0]]
    data = dict(
        keep_device_results.collect(_checks_dir(tmp_path), None), bench=dict(BENCH, runs=runs)
    )
    path = tmp_path / "cuda-device.json"
    path.write_text(json.dumps(data))
    (text,) = cuda_device_speed(Run("cuda-device", path, data))
    assert text.startswith("On the NVIDIA H200 (2026-12-04), at batch 1")
    assert "takes 44 us greedy and 261 us sampled, 5-28 GB/s of the copy's 4269" in text
    assert "at batch 64, 479 GB/s greedy" in text
