"""Keeps what the device scripts wrote as one file the docs' tables are made from.

    python benchmarks/device/keep_device_results.py CHECKS_DIR [--graph GRAPH_DIR]
        [--paired PAIRED_DIR] [--out docs/results/cuda-device.json]

CHECKS_DIR holds run_device_checks.sh's output (env.txt, check.json, bench.json,
pytest.xml, memcheck.txt); GRAPH_DIR run_graph_checks.sh's (graph.json, summary.txt);
PAIRED_DIR a before/after comparison of two builds' `device_check bench`, run alternately
in one lease (old1.json, new1.json, old2.json, new2.json, ...): kept as the runs of each.
Every figure is copied, none computed: `_readme_sections.cuda_device` renders them. A file
a run did not write is left out, and the table then says so rather than guessing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _env(path: Path) -> dict:
    """date, gpu (name, memory, driver), host cpu and nvcc from env.txt."""
    text = path.read_text(errors="replace")
    out = {}
    for key, pattern in (
        ("datetime", r"^date: (.+)$"),
        ("gpu", r"^gpu: (.+)$"),
        ("host_cpu", r"^host cpu: (.+)$"),
        ("nvcc", r"Cuda compilation tools, (release [^\n]+)"),
    ):
        found = re.search(pattern, text, re.M)
        if found:
            out[key] = found.group(1).strip()
    return out


def _pytest(path: Path) -> dict:
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = [
        case.get("name")
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return counts


def _memcheck(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if "ERROR SUMMARY" in ln]
    return lines[-1].strip("= ").strip() if lines else ""


def _paired(directory: Path) -> dict:
    """{'before': [runs of old1, old2, ...], 'after': [runs of new1, ...]}, in run order."""
    out = {}
    for side, prefix in (("before", "old"), ("after", "new")):
        files = sorted(directory.glob(f"{prefix}[0-9]*.json"), key=lambda p: int(p.stem[3:]))
        out[side] = [json.loads(f.read_text())["runs"] for f in files]
    if not out["before"] or len(out["before"]) != len(out["after"]):
        raise SystemExit(f"{directory}: needs as many old<i>.json as new<i>.json, at least one")
    sides = directory / "sides.txt"  # run_all.sh: "before: ..." and "after: ..."
    if sides.is_file():
        for line in sides.read_text().splitlines():
            side, _, what = line.partition(":")
            if side in ("before", "after") and what.strip():
                out[f"{side}_is"] = what.strip()
    return out


def collect(checks: Path, graph: Path | None, paired: Path | None = None) -> dict:
    data = {"suite": "cuda-device"}
    if (checks / "env.txt").is_file():
        data.update(_env(checks / "env.txt"))
    if (checks / "check.json").is_file():
        check = json.loads((checks / "check.json").read_text())
        check.pop("examples", None)
        data["check"] = check
    if (checks / "bench.json").is_file():
        data["bench"] = json.loads((checks / "bench.json").read_text())
    if (checks / "pytest.xml").is_file():
        data["pytest_test_cuda"] = _pytest(checks / "pytest.xml")
    if (checks / "memcheck.txt").is_file():
        data["memcheck"] = _memcheck(checks / "memcheck.txt")
    if graph is not None and (graph / "graph.json").is_file():
        data["graph"] = json.loads((graph / "graph.json").read_text())
    if paired is not None:
        data["bench_paired"] = _paired(paired)
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", type=Path)
    parser.add_argument("--graph", type=Path)
    parser.add_argument("--paired", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/cuda-device.json")
    args = parser.parse_args(argv)
    if not (args.checks / "env.txt").is_file():
        parser.error(f"{args.checks} holds no env.txt: not run_device_checks.sh's output")
    data = collect(args.checks, args.graph, args.paired)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out} ({', '.join(k for k in data if k != 'suite')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
