"""One PNG from pytest-benchmark JSON files, so the figures are looked at, not read from a
200-column table.

    cd benchmarks
    python3 -m pytest -q bench_verify.py bench_baselines.py -k real --benchmark-json=verify.json
    python3 -m pytest -q bench_server.py --benchmark-json=server.json
    python3 report.py verify.json server.json -o ../docs/benchmark_report.png

Panels, from whatever the files hold:
- verify against the read pass (``verify_over_read_pass``) and the llama.cpp chain against
  verify (``chain_over_verify``), per vocabulary size and k (bench_verify / bench_baselines);
- tokens/s, speculative against plain, per case (bench_generation, bench_server,
  bench_first_request's parity), with the acceptance rate where it is known.
The figure's title carries the date and machine of the files. Needs matplotlib.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(paths):
    benchmarks, machines, dates = [], set(), set()
    for path in paths:
        data = json.loads(Path(path).read_text())
        info = data.get("machine_info", {})
        machines.add(
            f"{info.get('cpu', {}).get('brand_raw', '?')}, "
            f"{info.get('cpu', {}).get('count', '?')} CPUs"
        )
        dates.add(str(data.get("datetime", "?"))[:10])
        benchmarks += data.get("benchmarks", [])
    return benchmarks, sorted(machines), sorted(dates)


def verify_points(benchmarks):
    """(label, V, k, verify/read, chain/verify) for the default-thread verify benchmarks."""
    out = []
    for b in benchmarks:
        e = b.get("extra_info", {})
        if "verify_over_read_pass" not in e or b.get("name", "").find("threads-default") < 0:
            continue
        out.append(
            (
                f"{e.get('input')} {e.get('dtype')} {e.get('params')}",
                e["vocab"],
                e["k"],
                e["verify_over_read_pass"],
                e.get("chain_over_verify"),
            )
        )
    return out


def generation_points(benchmarks):
    """(case, plain tok/s, speculative tok/s, acceptance or None)."""
    out = []
    for b in benchmarks:
        e = b.get("extra_info", {})
        name = b.get("name", "")
        if "plain_tok_s" in e and "spec_tok_s" in e:
            out.append(
                (name.replace("bench_", ""), e["plain_tok_s"], e["spec_tok_s"], e.get("acceptance"))
            )
        elif "plain_tok_s" in e and "pyspec_tok_s" in e:
            out.append(
                (
                    name.replace("bench_server_against_plain_llama_cpp_server", "server"),
                    e["plain_tok_s"],
                    e["pyspec_tok_s"],
                    None,
                )
            )
    return out


def render(benchmarks, machines, dates, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verify, generation = verify_points(benchmarks), generation_points(benchmarks)
    panels = [p for p in (verify and "verify", generation and "generation") if p]
    if not panels:
        raise SystemExit("report: no verify ratios or generation rates in these files")
    # verify-all has ~26 series: their legend goes below the plot, in two columns, and the
    # figure grows to hold it instead of the legend covering the lines.
    series = 2 * len({(p[0], p[1]) for p in verify})
    legend_rows = (series + 1) // 2 if series > 8 else 0
    fig, axes = plt.subplots(
        1, len(panels), figsize=(7 * len(panels), 5 + 0.17 * legend_rows), squeeze=False
    )
    for ax, panel in zip(axes[0], panels):
        if panel == "verify":
            labels = sorted({(p[0], p[1]) for p in verify})
            for label, vocab in labels:
                pts = sorted((p[2], p[3], p[4]) for p in verify if (p[0], p[1]) == (label, vocab))
                ks = [p[0] for p in pts]
                ax.plot(
                    ks, [p[1] for p in pts], marker="o", label=f"verify/read, {label}, V={vocab}"
                )
                if all(p[2] for p in pts):
                    ax.plot(
                        ks,
                        [p[2] for p in pts],
                        marker="s",
                        linestyle="--",
                        label=f"chain/verify, {label}, V={vocab}",
                    )
            ax.axhline(1.0, color="gray", linewidth=0.8)
            ax.set_yscale("log")  # verify/read sits near 1, chain/verify at 10-60
            ax.set_xlabel("draft length k (k + 1 rows)")
            ax.set_ylabel("ratio of medians (log scale)")
            ax.set_title(
                "verify against one read of the logits, and the llama.cpp chain against verify"
            )
            if legend_rows:
                ax.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.12))
            else:
                ax.legend(fontsize=7)
        else:
            names = [p[0] for p in generation]
            xs = range(len(names))
            ax.bar([x - 0.2 for x in xs], [p[1] for p in generation], width=0.4, label="plain")
            ax.bar(
                [x + 0.2 for x in xs], [p[2] for p in generation], width=0.4, label="speculative"
            )
            for x, p in zip(xs, generation):
                note = f"{p[2] / p[1]:.2f}x" + (
                    f"\naccept {100 * p[3]:.0f}%" if p[3] is not None else ""
                )
                ax.annotate(note, (x + 0.2, p[2]), ha="center", va="bottom", fontsize=7)
            ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=7)
            ax.set_ylabel("tokens/s")
            ax.set_title("speculative against plain decoding")
            ax.legend(fontsize=8)
    fig.suptitle(f"pyspec benchmarks, {', '.join(dates)}; {'; '.join(machines)}", fontsize=9)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    print(
        f"report: wrote {output} ({len(verify)} verify points, {len(generation)} generation cases)"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="pytest-benchmark JSON files (--benchmark-json)")
    parser.add_argument("-o", "--output", default="benchmark_report.png")
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="files without figures to plot (suites such as logprobs or graph, "
        "whose numbers are tables): say so and write nothing, exit 0",
    )
    args = parser.parse_args(argv)
    for path in args.json:
        if not Path(path).is_file():
            parser.error(f"{path}: no such file")
    benchmarks, machines, dates = load(args.json)
    if args.allow_empty and not (verify_points(benchmarks) or generation_points(benchmarks)):
        print(
            "report: nothing to plot in these files (no verify ratios or generation rates); "
            "no picture written"
        )
        return 0
    render(benchmarks, machines, dates, Path(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
