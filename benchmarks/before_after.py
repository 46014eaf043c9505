"""Before/after timings of two pyspec installs, measured in one run, pairs alternating.

A refactor of the Python layer (or the C library) must not slow the calls down. This runs
the same workloads against two installs of pyspec (each a directory that ``pip install
--no-deps --target DIR`` filled, or "installed" for the one in site-packages), each in a
fresh subprocess, alternating before/after so that a machine's load drifts over both alike,
and prints each workload's median time per call and the after/before ratio per pair.

    python3 benchmarks/before_after.py --before /tmp/before-site --after installed \\
        --pairs 5 [--workloads verify_small,generation] [--json out.json]

Workloads: the per-call overhead of the Python layer on small rows (verify, verify_batch,
verify_from_pointer, sample), a real-size verify row set (Qwen's 151936-token rows, where the
C pass dominates) and, with the models cached, a greedy generation with prompt lookup on
Gemma 3 270M through SpeculativeLlama (tokens per second of the whole loop).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WORKLOADS = (
    "verify_small",
    "verify_batch_small",
    "verify_pointer_small",
    "sample_small",
    "verify_qwen_rows",
    "generation",
)
PROCESS_TIMEOUT = 600  # seconds for one workload in one process

# Runs inside the subprocess: one workload, its median seconds per call on stdout.
CHILD = r"""
import json, statistics, sys, time
import numpy as np
import pyspec

name, repeats = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)


def timed(call, number):
    call()  # warm: the verifier's scratch, caches
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        runs.append((time.perf_counter() - t0) / number)
    return statistics.median(runs)


small = rng.standard_normal((5, 1000)).astype(np.float32)
drafts = [int(np.argmax(r)) for r in small[:4]]
greedy = pyspec.SamplingParams.greedy_params()
if name == "verify_small":
    seconds = timed(lambda: pyspec.verify(small, drafts, params=greedy), 2000)
elif name == "verify_batch_small":
    reqs = [pyspec.VerifyRequest(small, drafts, None, greedy, 7 * i) for i in range(8)]
    seconds = timed(lambda: pyspec.verify_batch(reqs), 500)
elif name == "verify_pointer_small":
    address = small.__array_interface__["data"][0]
    seconds = timed(lambda: pyspec.verify_from_pointer(address, 1000, drafts, params=greedy), 2000)
elif name == "sample_small":
    params = pyspec.SamplingParams(seed=3)
    seconds = timed(lambda: pyspec.sample(small[0], params, 5), 2000)
elif name == "verify_qwen_rows":
    rows = rng.standard_normal((9, 151936)).astype(np.float32)
    rows[np.arange(8), np.arange(8) * 100] += 30.0  # every draft accepted: all rows read
    params = pyspec.SamplingParams(seed=1)
    seconds = timed(lambda: pyspec.verify(rows, [i * 100 for i in range(8)], params=params), 50)
else:
    raise SystemExit(f"unknown workload {name}")
print(json.dumps({"seconds": seconds}))
"""

# The generation workload: its own script, given the model's path by the driver (the two
# installs keep the model assembler in different modules).
GENERATION = r"""
import json, statistics, sys, time
from pyspec.llama import SpeculativeLlama

path, repeats = sys.argv[1], int(sys.argv[2])
PROMPT = ("<start_of_turn>user\nRepeat this text exactly:\nThe quick brown fox jumps over the "
          "lazy dog. The five boxing wizards jump quickly. Pack my box with five dozen liquor "
          "jugs.<end_of_turn>\n<start_of_turn>model\n")
llm = SpeculativeLlama(path, draft="lookup", n_ctx=1024, n_threads=2, verbose=False, seed=0)
llm.create_completion(PROMPT, max_tokens=8, temperature=0.0)  # warm
rates = []
for _ in range(repeats):
    t0 = time.perf_counter()
    out = llm.create_completion(PROMPT, max_tokens=96, temperature=0.0)
    n = out["usage"]["completion_tokens"]
    rates.append((time.perf_counter() - t0) / n)
llm.close()
print(json.dumps({"seconds": statistics.median(rates)}))
"""


def _gemma_path() -> str:
    """Gemma 3 270M's file, assembled by whichever model assembler this environment's pyspec
    has (pyspec.testing.models since the tooling left the library, pyspec.models before)."""
    try:
        from pyspec.testing.models import ensure_model
    except ImportError:
        from pyspec.models import ensure_model
    return str(ensure_model("gemma3-270m"))


def _env(site: str) -> dict:
    env = dict(os.environ)
    if site != "installed":
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYSPEC_COST_CACHE", "off")
    return env


def _run(site: str, workload: str, repeats: int, model: str) -> float:
    if workload == "generation":
        cmd = [sys.executable, "-c", GENERATION, model, str(repeats)]
    else:
        cmd = [sys.executable, "-c", CHILD, workload, str(repeats)]
    out = subprocess.run(
        cmd, env=_env(site), capture_output=True, text=True, cwd="/", timeout=PROCESS_TIMEOUT
    )
    if out.returncode != 0:
        raise SystemExit(f"{workload} with {site} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--before", required=True, help="site directory of the old install, or 'installed'"
    )
    ap.add_argument("--after", default="installed", help="site directory of the new install")
    ap.add_argument("--pairs", type=int, default=5, help="before/after pairs per workload")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per process (median)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", help="write the measurements here")
    args = ap.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    model = ""
    if "generation" in workloads:
        model = _gemma_path()
    report = {}
    for w in workloads:
        pairs = []
        for i in range(args.pairs):
            order = (("before", args.before), ("after", args.after))
            if i % 2:  # alternate which goes first
                order = order[::-1]
            got = {label: _run(site, w, args.repeats, model) for label, site in order}
            pairs.append(got)
            print(
                f"  {w} pair {i + 1}: before {got['before'] * 1e6:9.1f} us, after "
                f"{got['after'] * 1e6:9.1f} us, ratio {got['after'] / got['before']:.3f}",
                file=sys.stderr,
                flush=True,
            )
        ratios = [p["after"] / p["before"] for p in pairs]
        report[w] = {
            "before_us": statistics.median(p["before"] for p in pairs) * 1e6,
            "after_us": statistics.median(p["after"] for p in pairs) * 1e6,
            "ratio_median": statistics.median(ratios),
            "ratios": ratios,
        }
    print(f"{'workload':24} {'before':>12} {'after':>12} {'after/before':>13}  (pairs)")
    for w, r in report.items():
        print(
            f"{w:24} {r['before_us']:10.1f}us {r['after_us']:10.1f}us {r['ratio_median']:13.3f}  "
            + " ".join(f"{x:.3f}" for x in r["ratios"])
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "before": args.before,
                    "after": args.after,
                    "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "workloads": report,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
