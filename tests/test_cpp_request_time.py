"""The C++ tool's whole-request time in the draftless tables: a request the model ended
before the token limit is charged the tokens it decoded, not the whole limit (until session
41 it was, and the C++ chat sums ran 12-16% long)."""

import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
KEPT_RUN = BENCHMARKS.parent / "docs" / "results" / "draftless.json"


@pytest.fixture
def bench_modules(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _cpp_request_time
    import _readme_sections

    return _cpp_request_time, _readme_sections


def test_an_early_end_is_charged_its_own_tokens_and_a_long_draft_the_limit(bench_modules):
    timing, _ = bench_modules
    # 9 tokens at 30 tok/s, then the end of text: 0.3 s of decoding, not 96 tokens' 3.2 s.
    assert timing.request_seconds(2.0, 9, 30.0, 96) == pytest.approx(2.0 + 9 / 30)
    # Carried past the limit by an accepted draft (130 tokens): the limit at its rate.
    assert timing.request_seconds(2.0, 130, 40.0, 96) == pytest.approx(2.0 + 96 / 40)
    assert timing.request_seconds(2.0, 96, 32.0, 96) == pytest.approx(2.0 + 3.0)
    assert timing.request_seconds(2.0, 0, 0.0, 96) == 2.0  # nothing decoded, no rate


def test_a_kept_run_is_shown_by_the_rule_it_did_not_have(bench_modules):
    """docs/results/draftless.json (written with the old rule until session 41): the table
    works the C++ seconds out again from what the tool reported, and leaves pyspec's as
    measured."""
    timing, sections = bench_modules
    e = json.loads(KEPT_RUN.read_text())["benchmarks"][0]["extra_info"]
    limit = e["max_tokens"]
    seconds = sections._whole_request_seconds(e)
    ended_early = 0
    for workload, per_mode in seconds.items():
        rows = [r for r in e["rows"] if r["workload"] == workload]
        for mode, total in per_mode.items():
            if not mode.startswith("c++ "):
                assert total == pytest.approx(sum(r[mode]["seconds"] for r in rows))
                continue
            expected = 0.0
            for r in rows:
                got = r[mode]
                decoded = min(got["tokens"], limit) / got["rate"]
                expected += got["prompt_seconds"] + decoded
                ended_early += got["tokens"] < limit
            assert total == pytest.approx(expected)
            # Never more than the old rule charged (the limit at its rate, always), and less
            # wherever a request ended early.
            old = sum(r[mode]["prompt_seconds"] + limit / r[mode]["rate"] for r in rows)
            early = any(r[mode]["tokens"] < limit for r in rows)
            assert total < old - 1e-6 if early else total == pytest.approx(old)
    assert ended_early > 0  # (the kept run has such requests: the test checks something)
