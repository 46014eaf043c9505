"""Rewrites the README's measured figures from the benchmark JSON committed in the repository.

    python3 benchmarks/readme_tables.py            # rewrite the generated sections
    python3 benchmarks/readme_tables.py --check    # exit 1 if a document differs from them
    python3 benchmarks/readme_tables.py --take bench-results   # copy new JSON in, then rewrite

The README and the documents in docs/ hold each measured table between
``<!-- generated:NAME begin -->`` and ``<!-- generated:NAME end -->``; NAME picks a
renderer in ``_readme_sections.SECTIONS``, which reads ``docs/results/<suite>.json``
(written by ``python3 -m pyspec bench <suite>``).
Everything between the markers is replaced, so a number typed there by hand does not
survive the next run, and ``--check`` (run by tests/test_readme.py) fails while a document
and the JSON disagree. Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_json import REPO, RESULTS_DIR, MissingResults, load_first, not_measured, stripped
from _readme_sections import SECTIONS
from _take_records import llama_build_record, suite_run_record

MARKER = re.compile(r"^<!-- generated:([\w-]+) (begin|end) -->$", re.M)


def render(readme: str, results_dir: Path) -> str:
    """README text with every generated section rendered afresh from the JSON."""
    out, pos, open_name = [], 0, None
    for m in MARKER.finditer(readme):
        name, edge = m.groups()
        if edge == "begin":
            if open_name:
                raise SystemExit(
                    f"readme_tables: section {open_name!r} has no end marker before {name!r}"
                )
            if name not in SECTIONS:
                raise SystemExit(
                    f"readme_tables: unknown section {name!r}; known: {', '.join(SECTIONS)}"
                )
            out.append(readme[pos : m.end()])
            open_name = name
        else:
            if name != open_name:
                raise SystemExit(f"readme_tables: end marker of {name!r} without its begin marker")
            suites, renderer = SECTIONS[name]
            try:
                run = load_first(suites, results_dir)
                body = renderer(run) if run else not_measured(suites, results_dir)
            except (MissingResults, KeyError) as e:
                # KeyError: the JSON lacks a figure (an older benchmark's extra_info).
                raise SystemExit(f"readme_tables: section {name!r}: {e}") from None
            out.append("\n" + "\n".join(body) + "\n")
            open_name = None
        pos = m.start() if edge == "end" else m.end()
    if open_name:
        raise SystemExit(f"readme_tables: section {open_name!r} has no end marker")
    return "".join(out) + readme[pos:]


def take(source: Path, results_dir: Path) -> list:
    """Copies SOURCE/<suite>.json for the suites the README uses, without raw timings."""
    taken = []
    for suite in sorted({s for suites, _ in SECTIONS.values() for s in suites}):
        path = source / f"{suite}.json"
        if not path.is_file():
            continue
        try:
            data = stripped(json.loads(path.read_text()))
        except ValueError:
            # pytest-benchmark creates the file when the suite starts: still running, or failed
            print(f"readme_tables: {path} is not complete JSON; not taken", file=sys.stderr)
            continue
        results_dir.mkdir(parents=True, exist_ok=True)
        (results_dir / path.name).write_text(json.dumps(data, indent=1) + "\n")
        taken.append(suite)
    return taken


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 (with a diff) if the README is not what this writes",
    )
    parser.add_argument(
        "--take",
        metavar="DIR",
        type=Path,
        help="first copy DIR/<suite>.json (pyspec bench --out DIR) into the results",
    )
    parser.add_argument(
        "--take-build",
        action="store_true",
        help="first record the newest `pyspec install-llama` build (its time) "
        "from ~/.cache/pyspec as llama-build.json",
    )
    parser.add_argument(
        "--take-test-log",
        metavar="LOG",
        type=Path,
        help="first record the test suite's counts and time from the log of a "
        "whole run (`cd tests && python3 -m pytest -q > LOG`) as test-run.json",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        action="append",
        help="the document to rewrite (repeatable; default: README.md and docs/*.md)",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS_DIR, help="the JSON files' directory"
    )
    args = parser.parse_args(argv)
    if args.take:
        if args.check:
            parser.error("--take changes the results; it cannot go with --check")
        print(
            f"readme_tables: took {', '.join(take(args.take, args.results)) or 'nothing'} "
            f"from {args.take}"
        )
    if (args.take_build or args.take_test_log) and args.check:
        parser.error(
            "--take-build and --take-test-log change the results; they cannot go with --check"
        )
    records = []
    if args.take_build:
        cache = Path(os.environ.get("PYSPEC_CACHE") or Path.home() / ".cache" / "pyspec")
        records.append(("llama-build", llama_build_record(cache)))
    if args.take_test_log:
        records.append(("test-run", suite_run_record(args.take_test_log)))
    for name, data in records:
        args.results.mkdir(parents=True, exist_ok=True)
        (args.results / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        print(f"readme_tables: recorded {name}.json")
    documents = args.readme or [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    differ = False
    for document in documents:
        current = document.read_text()
        wanted = render(current, args.results)
        if wanted == current:
            continue
        if args.check:
            differ = True
            name = document.name
            diff = difflib.unified_diff(
                current.splitlines(),
                wanted.splitlines(),
                name,
                f"{name} as generated",
                lineterm="",
                n=1,
            )
            print("\n".join(list(diff)[:60]))
            print(
                f"readme_tables: {document} differs from the JSON in {args.results}; "
                "run python3 benchmarks/readme_tables.py"
            )
        else:
            document.write_text(wanted)
            print(f"readme_tables: rewrote {document}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
