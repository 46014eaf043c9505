"""The READMEs hold only what the repository backs: every file they name exists, and every
measured figure is what benchmarks/readme_tables.py writes from the JSON in docs/results/."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
READMES = ["README.md", "benchmarks/README.md"] + sorted(
    f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")
)
# Paths the READMEs name as what a command writes, not as files of the repository.
OUTPUTS = ("bench-results/", "build/")
EXTENSIONS = r"\.(py|h|c|cu|cuh|cpp|sh|json|png|md|toml|txt|ini|cfg|yml|yaml)$"
SKIP_DIRS = {".git", "build", "__pycache__", ".benchmarks", ".pytest_cache"}


def _named_paths(text: str) -> set:
    """Backticked words that look like repository files or folders, and the paths listed in
    fenced blocks (the architecture listing). Commands, URLs, ~ paths, placeholders (<x>,
    *) and environment settings are not paths of the repository."""
    fenced = re.findall(r"^```.*?^```", text, re.S | re.M)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    words = {w.strip() for w in re.findall(r"`([^`]+)`", prose)}  # spans may wrap lines
    words |= {w for block in fenced for w in block.split() if "/" in w and re.search(EXTENSIONS, w)}
    paths = set()
    for w in words:
        if (
            re.search(r"\s|[=<>*$~:]", w)
            or w.startswith(("/", "-", "http"))
            or w.startswith(OUTPUTS)
        ):
            continue
        first = w.split("/")[0]
        # 'chain/verify' and 'PYSPEC_CDEF_BEGIN/END' are words, not paths: a path either has
        # a file's extension or starts at a folder of the repository.
        if re.search(EXTENSIONS, w) or ("/" in w and (REPO / first).exists()):
            paths.add(w)
    return paths


def _repo_file_names() -> set:
    names = set()
    for _, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]  # build outputs are not the repository
        names.update(dirs, files)
    return names


def test_path_extraction_sees_paths_and_skips_words():
    text = (
        "Run `tests/test_cli.py`, see `csrc/pyspec.h` and `rules.h`; not `chain/verify`, "
        "`~/.cache/pyspec`, `bench-results/<suite>.json`, `PYSPEC_LIBRARY=/x/lib.so`, "
        "`python3 -m pyspec bench`, `bench-results/report.png`, `/v1/completions`.\n"
        "```\ncsrc/verify.c   per-row acceptance\n```\n"
    )
    assert _named_paths(text) == {"tests/test_cli.py", "csrc/pyspec.h", "rules.h", "csrc/verify.c"}


@pytest.mark.parametrize("readme", READMES)
def test_every_file_the_readme_names_exists(readme):
    path = REPO / readme
    names = _repo_file_names()
    missing = []
    for named in sorted(_named_paths(path.read_text())):
        if "/" in named.rstrip("/"):
            # relative to the repository, or to the README's own folder (benchmarks/README.md)
            if not ((REPO / named).exists() or (path.parent / named).exists()):
                missing.append(named)
        elif named.rstrip("/") not in names and not (path.parent / named).exists():
            missing.append(named)  # a bare name ('rules.h'): some file of the repository
    assert not missing, f"{readme} names files that are not in the repository: {missing}"


def test_readme_figures_are_what_the_script_writes_from_the_json():
    script = REPO / "benchmarks" / "readme_tables.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_fails_on_a_typed_number(tmp_path):
    """A number edited by hand between the markers is caught, and the script puts back the
    JSON's figure."""
    text = (REPO / "README.md").read_text()
    begin = "<!-- generated:generation-table begin -->\n"
    assert begin in text
    edited = text.replace(begin, begin + "| typed | 99.9 tok/s |\n", 1)
    readme = tmp_path / "README.md"
    readme.write_text(edited)
    script = [
        sys.executable,
        str(REPO / "benchmarks" / "readme_tables.py"),
        "--readme",
        str(readme),
    ]
    check = subprocess.run(script + ["--check"], capture_output=True, text=True)
    assert check.returncode == 1 and "99.9 tok/s" in check.stdout
    assert subprocess.run(script, capture_output=True, text=True).returncode == 0
    assert readme.read_text() == text


def test_sections_come_from_the_json_with_date_and_machine(tmp_path):
    """On a hand-written server.json: the figures, the date and the machine are the file's;
    without the file the section says it is not measured instead of keeping the old table."""
    import json

    results = tmp_path / "results"
    results.mkdir()

    def info(plain, spec, ratios):
        return {"plain_tok_s": plain, "pyspec_tok_s": spec, "ratios": ratios}

    (results / "server.json").write_text(
        json.dumps(
            {
                "datetime": "2031-01-02T03:04:05+00:00",
                "other_processes_load": 0.02,
                "machine_info": {
                    "cpu": {
                        "brand_raw": "Test CPU",
                        "count": 8,
                        "flags": ["avx2", "avx512f"],
                        "family": 25,  # a bare brand (a VM's 'AMD EPYC') needs its generation
                        "model": 17,
                    }
                },
                "benchmarks": [
                    {
                        "name": "bench_server_against_plain_llama_cpp_server[repeat-completion]",
                        "extra_info": info(20.0, 40.0, [1.5, 2.5]),
                    },
                    {
                        "name": "bench_server_against_plain_llama_cpp_server[free-chat]",
                        "extra_info": info(20.0, 30.0, [1.25, 1.75]),
                    },
                ],
            }
        )
    )
    readme = tmp_path / "README.md"
    readme.write_text(
        "intro\n<!-- generated:server-table begin -->\nold 1.93x\n"
        "<!-- generated:server-table end -->\nafter\n"
    )
    script = [
        sys.executable,
        str(REPO / "benchmarks" / "readme_tables.py"),
        "--readme",
        str(readme),
    ]
    assert subprocess.run(script + ["--results", str(results)]).returncode == 0
    text = readme.read_text()
    assert (
        "old 1.93x" not in text and text.startswith("intro\n") and text.endswith("end -->\nafter\n")
    )
    assert (
        "Measured 2031-01-02 on Test CPU (family 25, model 17), 8 CPUs, AVX-512; "
        "other processes kept 2%"
    ) in text
    assert "| completion, repeated file | 20.0 tok/s | 40.0 tok/s | 2.00x (1.50-2.50) |" in text
    assert "| 1.50x (1.25-1.75) |" in text
    assert subprocess.run(script + ["--results", str(tmp_path / "none")]).returncode == 0
    text = readme.read_text()
    assert (
        "Not measured: `" in text and "none/` holds no server.json" in text and "tok/s" not in text
    )


def test_the_measured_line_names_a_build_that_leaves_out_what_the_cpu_has():
    """An AVX2-only or AMX-less llama.cpp build on an AMX Xeon batches as its kernels do:
    the line says so. A build with every level the CPU has, or a file recorded before the
    field, adds nothing (the tables already in docs/ keep their text)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _bench_json import Run

    amx_cpu = ["avx2", "avx512f", "amx_tile", "amx_int8"]

    def line(cpu_flags, features):
        data = {
            "datetime": "2031-01-02T03:04:05+00:00",
            "machine_info": {"cpu": {"brand_raw": "Test CPU", "count": 2, "flags": cpu_flags}},
        }
        if features is not None:
            data["llama_cpp_features"] = features
        return Run("x", REPO / "docs" / "results" / "x.json", data).measured_line()

    assert "llama.cpp built" not in line(amx_cpu, None)
    assert "llama.cpp built" not in line(amx_cpu, ["AVX2", "AVX512", "AMX_INT8", "REPACK"])
    assert "llama.cpp built" not in line(["avx2"], ["AVX2", "FMA"])
    assert "AVX-512, AMX; llama.cpp built for AVX2 only (without AMX, AVX-512) (`" in line(
        amx_cpu, ["AVX", "AVX2", "FMA", "REPACK"]
    )
    assert "; llama.cpp built for AVX-512 only (without AMX)" in line(
        amx_cpu, ["AVX2", "AVX512", "AVX512_VNNI"]
    )
    assert "; llama.cpp built without AVX2" in line(["avx2"], ["SSE3"])


def test_the_measured_line_names_a_build_with_pyspecs_q4k_kernel():
    """pyspec's Q4_K kernel changes the batch curve without changing llama.cpp's features:
    the line says when the run's build had it (``q4k_kernel``), beside any level left out."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _bench_json import Run

    def line(kernel, features=("AVX2", "AVX512", "AVX512_VNNI"), q6k=None):
        data = {
            "datetime": "2031-01-02T03:04:05+00:00",
            "machine_info": {"cpu": {"brand_raw": "Test CPU", "count": 2, "flags": ["avx512f"]}},
            "llama_cpp_features": list(features),
        }
        if kernel is not None:
            data["q4k_kernel"] = kernel
        if q6k is not None:
            data["q6k_kernel"] = q6k
        return Run("x", REPO / "docs" / "results" / "x.json", data).measured_line()

    assert "Q4_K" not in line(None) + line(0) + line(0, q6k=0)
    assert "AVX-512; with pyspec's Q4_K kernel (`" in line(1)
    assert "AVX-512; with pyspec's Q4_K kernel (`" in line(2, q6k=0)
    assert "built for AVX2 only (without AVX-512); with pyspec's Q4_K kernel" in line(1, ["AVX2"])
    assert "AVX-512; with pyspec's Q4_K and Q6_K kernels (`" in line(2, q6k=1)


def test_the_measured_line_names_a_machine_that_gave_everyone_huge_pages():
    """With transparent huge pages at "always" llama.cpp's weights had 2 MB pages as
    pyspec's do, and the line says so; the usual setting, or a file recorded before the
    field, adds nothing."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _bench_json import Run

    def line(thp):
        data = {
            "datetime": "2031-01-02T03:04:05+00:00",
            "machine_info": {"cpu": {"brand_raw": "Test CPU", "count": 2, "flags": ["avx2"]}},
        }
        if thp is not None:
            data["transparent_huge_pages"] = thp
        return Run("x", REPO / "docs" / "results" / "x.json", data).measured_line()

    assert "huge pages" not in line(None) + line("madvise") + line("never")
    assert (
        "AVX2, no AVX-512; transparent huge pages always (llama.cpp's own weights in 2 MB "
        "pages too) (`"
    ) in line("always")


def test_the_script_rewrites_every_document_that_holds_a_section(tmp_path):
    """The README and docs/*.md: a typed number in a document of docs/ is caught too."""
    doc = REPO / "docs" / "performance.md"
    begin = "<!-- generated:verify-table begin -->\n"
    assert begin in doc.read_text()
    edited = tmp_path / "performance.md"
    edited.write_text(doc.read_text().replace(begin, begin + "| typed | 77.7x |\n", 1))
    script = [sys.executable, str(REPO / "benchmarks" / "readme_tables.py"), "--check"]
    check = subprocess.run(script + ["--readme", str(edited)], capture_output=True, text=True)
    assert check.returncode == 1 and "77.7x" in check.stdout
    assert subprocess.run(script, capture_output=True, text=True).returncode == 0  # the tree's


def test_the_table_of_kept_runs_has_every_draftless_json_and_marks_the_readmes(monkeypatch):
    """The README's 'every kept run' table (draftless-runs) is a row per
    docs/results/draftless*.json, the README's own run marked, each ratio over that run's
    best C++ mode: a run kept later shows up without anyone typing it in."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from _bench_json import load
    from _readme_sections import draftless_runs

    results = REPO / "docs" / "results"
    lines = draftless_runs(load("draftless", results))
    rows = [line for line in lines if line.startswith("| 20")]
    kept = sorted(p.name for p in results.glob("draftless*.json"))
    assert len(rows) == len(kept) >= 2
    for name in kept:
        assert sum(f"docs/results/{name}`" in row for row in rows) == 1, name
    assert sum("(the README's)" in row for row in rows) == 1
    assert "(the README's)" in next(r for r in rows if "docs/results/draftless.json`" in r)


def test_the_draftless_table_says_whether_pyspecs_weights_were_in_2mb_pages(monkeypatch):
    """A run records each pyspec object's 2 MB pages (bench_draftless, since session 42): the
    table says one figure where every object got the same, and names the object that got
    fewer and why; a run kept before the field says nothing of pages."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from _readme_sections import _huge_pages_sentence

    def pages(mib, why_not=""):
        return {"bytes": mib << 20, "regions": 1, "seconds": 0.1, "why_not": why_not}

    assert _huge_pages_sentence({}) == ""
    same = _huge_pages_sentence({"huge_pages": {"lookup": pages(1003), "before": pages(1003)}})
    assert same == " Each of pyspec's 2 objects had its weights in 2 MB pages (1003 MiB)."
    short = _huge_pages_sentence(
        {"huge_pages": {"lookup": pages(1003), "before": pages(0, "no free 2 MB pages")}}
    )
    assert "lookup 1003 MiB; before 0 MiB (no free 2 MB pages)." in short
    assert "Each of" not in short
    partial = _huge_pages_sentence(  # every object some pages, one not all: said, not hidden
        {"huge_pages": {"lookup": pages(1003), "before": pages(1003, "some left out")}}
    )
    assert "before 1003 MiB (some left out)." in partial


def test_the_draft_length_table_sets_apart_requests_the_draft_models_prompt_pass_fills(
    monkeypatch,
):
    """bench_draft_lengths' summary: a drafted token's cost without the draft model's prompt
    pass, and the table's ratio without the requests that ended within a round or two."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from _bench_json import Run
    from _readme_sections import draft_lengths_table
    from bench_draft_lengths import summarise

    def request(rid, plain_rate, rate, tokens, prompt_pass):
        speculative = dict(
            rate=rate, tokens=tokens, drafted=10, accepted=5, rounds=5,
            target_ms_per_round=100.0, draft_ms_per_round=20.0 + 200.0 * prompt_pass,
            draft_prompt_seconds=prompt_pass,
        )  # fmt: skip
        return {"id": rid, "plain": dict(rate=plain_rate, tokens=tokens), "k=1": speculative}

    rows = [request("long", 10.0, 5.0, 96, 1.0), request("short", 10.0, 1.0, 2, 0.5)]
    s = summarise(rows, ["plain", "k=1"])["chat"]
    assert s["over_plain"]["k=1"] == pytest.approx((0.5 * 0.1) ** 0.5)
    # 5 rounds of 20 ms drafting 10 tokens per request once the prompt passes are taken out:
    # 10 ms a drafted token, against plain's 100 ms a token
    assert s["draft_token_over_plain"]["k=1"] == pytest.approx(0.1)
    assert s["draft_prompt_seconds"]["k=1"] == pytest.approx(0.75)
    extra = dict(max_tokens=96, threads=2, modes=["plain", "k=1"], rows=rows, summary={"chat": s})
    data = {"benchmarks": [{"name": "bench_draft_lengths", "extra_info": extra}]}
    table = "\n".join(draft_lengths_table(Run("x", REPO / "docs" / "results" / "x.json", data)))
    assert "ended within 8 tokens (short (2 tokens)), over plain: k=1 0.50x." in table
    rows[1] = request("short", 10.0, 1.0, 96, 0.5)
    table = "\n".join(draft_lengths_table(Run("x", REPO / "docs" / "results" / "x.json", data)))
    assert "ended within" not in table


def test_the_server_chats_summary_and_table(monkeypatch):
    """bench_server_chats' summary: each server's decode rate, its ratio to plain per request,
    acceptance where the server reports drafts, llama-server's best mode; and the table
    that says them, with pyspec's memory."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    pytest.importorskip("openai")
    from _bench_json import Run
    from _readme_sections import server_chats_table
    from bench_server_chats import rate_after_first, summarise

    assert rate_after_first({"stamps": [1.0, 3.0]}, 11) == pytest.approx(5.0)
    assert rate_after_first({"stamps": [1.0]}, 1) == 0.0  # nothing to time

    def mode(rate, drafted=None, accepted=None, text="same"):
        return dict(
            rate=rate, seconds=10.0, drafted=drafted, accepted=accepted,
            same_text_as_plain=text == "same",
        )  # fmt: skip

    modes = ["llama-cpp-python", "pyspec serve", "llama-server", "llama-server ngram-simple"]
    rows = [
        {"workload": "chat", "id": "a#0", "modes": dict(zip(modes, [
            mode(10.0), mode(20.0, 8, 6), mode(11.0), mode(12.0, 10, 5)]))},
        {"workload": "chat", "id": "a#1", "modes": dict(zip(modes, [
            mode(10.0), mode(5.0, 8, 2, text="other"), mode(11.0), mode(12.0, 10, 5)]))},
    ]  # fmt: skip
    s = summarise(rows, modes)["chat"]
    assert s["modes"]["pyspec serve"]["over_plain"] == pytest.approx(1.0)  # 2x and 0.5x
    assert s["modes"]["pyspec serve"]["acceptance"] == pytest.approx(0.5)
    assert s["modes"]["llama-server"]["acceptance"] is None  # it drafted nothing
    assert s["best_cpp"] == "llama-server ngram-simple"
    assert s["pyspec_over_best_cpp"] == pytest.approx(10.0 / 12.0, abs=1e-3)
    assert s["modes"]["pyspec serve"]["same_text_as_plain"] == 1
    memory = dict(memory_lookups_total=40.0, memory_hits_total=10.0, memory_tokens=900.0)
    extra = dict(
        max_tokens=96, threads=2, n_ctx=4096, conversations=1, modes=modes, rows=rows,
        summary={"chat": s}, pyspec_memory=memory,
    )  # fmt: skip
    data = {"benchmarks": [{"name": "bench_server_chats", "extra_info": extra}]}
    table = "\n".join(server_chats_table(Run("x", REPO / "docs" / "results" / "x.json", data)))
    assert "| `pyspec serve` | 10.00 | 1.00x | 20.0 | 50% |" in table
    assert "chat: 0.83x llama-server's best `--spec-type` there (`ngram-simple`)" in table
    assert "answered 10 of 40 lookups (25%) and held 900 tokens" in table
    assert "plain llama-cpp-python's text in chat 1/2 requests" in table
    assert "What the drafts gain" not in table  # no `no drafts` row in this run


def test_the_server_chats_draft_gains_read_llama_servers_idle_requests(monkeypatch):
    """With the `pyspec serve, no drafts` row: each server's drafts over its own decoding, and
    llama-server's best mode on the requests where it drafted nothing (another process, which
    may decode faster than plain llama-server's) against plain llama-server."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    pytest.importorskip("openai")
    from _bench_json import Run
    from _readme_sections import server_chats_line, server_chats_table
    from bench_server_chats import summarise

    def mode(rate, drafted=None, accepted=None):
        return dict(rate=rate, seconds=10.0, drafted=drafted, accepted=accepted,
                    same_text_as_plain=True)  # fmt: skip

    modes = ["llama-cpp-python", "pyspec serve", "pyspec serve, no drafts", "llama-server",
             "llama-server ngram-simple"]  # fmt: skip
    rows = [  # ngram-simple drafts nothing in a#0 and a#1, and 10 tokens in a#2
        {"workload": "chat", "id": f"a#{i}", "modes": dict(zip(modes, [
            mode(10.0), mode(r[0], 8, 6), mode(r[1]), mode(r[2]), mode(r[3], r[4], 5)]))}
        for i, r in enumerate([(16, 16, 10, 9, 0), (16, 16, 10, 16, 0), (32, 16, 10, 20, 10)])
    ]  # fmt: skip
    s = summarise(rows, modes)["chat"]
    extra = dict(
        max_tokens=96, threads=2, n_ctx=4096, conversations=1, modes=modes, rows=rows,
        summary={"chat": s},
    )  # fmt: skip
    data = {"benchmarks": [{"name": "bench_server_chats", "extra_info": extra}]}
    run = Run("x", REPO / "docs" / "results" / "x.json", data)
    table = "\n".join(server_chats_table(run))
    mine = (16 * 16 * 32) ** (1 / 3) / 16
    theirs = (9 * 16 * 20) ** (1 / 3) / 10
    assert f"pyspec serve with drafts ran {mine:.2f}x its own row without drafts" in table
    assert f"`ngram-simple` {theirs:.2f}x plain llama-server" in table
    # (geometric means: 12.00 over 9 and 16 tok/s, where the arithmetic mean is 12.50)
    assert (
        "on the 2 requests where `ngram-simple` drafted nothing its process already ran 1.20x "
        "plain llama-server's"
    ) in table
    assert "(12.00 against 10.00 tok/s; pyspec serve without drafts 16.00 there)" in table
    assert f"its drafts gained about {theirs / 1.2:.2f}x over its own decoding" in table
    line = "\n".join(server_chats_line(run))
    assert f"or about {theirs / 1.2:.2f}x over its own decoding: `ngram-simple` ran 1.20x" in line
