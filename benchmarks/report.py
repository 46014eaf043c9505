"""One PNG from pytest-benchmark JSON files, so the figures are looked at, not read from a
200-column table.

    cd benchmarks
    python3 -m pytest -q bench_verify.py bench_baselines.py -k real --benchmark-json=verify.json
    python3 -m pytest -q bench_server.py --benchmark-json=server.json
    python3 report.py verify.json server.json -o ../docs/benchmark_report.png

One panel per question, from whatever the files hold, each with few bars or lines and
its figures written on them:
- what speculation buys: tokens/s speculative over plain, per case (bench_generation,
  bench_server, bench_first_request's parity), with the acceptance rate where known;
- free drafts against llama.cpp's C++ draftless modes, per workload (bench_draftless);
- what one verify costs: verify against one read of the same rows per k, one line per
  vocabulary, and the llama.cpp chain against verify as a sentence (bench_verify).
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


def draftless_points(benchmarks):
    """(workload, {mode: decode tok/s over plain}) from bench_draftless's summary."""
    out = []
    for b in benchmarks:
        summary = b.get("extra_info", {}).get("summary")
        if not isinstance(summary, dict):
            continue
        for workload, s in summary.items():
            rate = s.get("rate", {}) if isinstance(s, dict) else None
            if isinstance(rate, dict) and rate.get("plain"):
                over = {m: r / rate["plain"] for m, r in rate.items() if m != "plain"}
                out.append((f"{workload} ({s.get('requests', '?')})", over))
    return out


_MODELS = {"qwen": "Qwen 1.5B", "gemma": "Gemma 270M"}
_VOCABS = {151936: "Qwen", 262144: "Gemma"}


def case_label(name: str) -> str:
    """'generation[qwen-lookup-edit-t0.8]' -> 'Qwen 1.5B, lookup, edit, T 0.8'."""
    inner = name[name.find("[") + 1 : name.rfind("]")] if "[" in name else name
    parts = inner.split("-")
    if len(parts) < 3 or parts[0] not in _MODELS:
        return inner or name
    temp = parts[-1]
    if temp.startswith("t"):
        temp = "greedy" if float(temp[1:] or 0) == 0 else f"T {temp[1:]}"
        parts = parts[:-1]
    drafter = "-".join(parts[1:-1]).replace("qwen-0.5b", "0.5B draft")
    return f"{_MODELS[parts[0]]}, {drafter}, {parts[-1]}, {temp}"


def _speedup_panel(ax, generation) -> None:
    """What speculation buys: one bar per case, its ratio written at its end."""
    cases = sorted(generation, key=lambda p: p[2] / p[1])
    ratios = [p[2] / p[1] for p in cases]
    ax.barh(range(len(cases)), ratios, color="tab:green")
    for y, (p, r) in enumerate(zip(cases, ratios)):
        note = f" {r:.2f}x" + (f" ({100 * p[3]:.0f}% accepted)" if p[3] is not None else "")
        ax.text(r, y, note, va="center", fontsize=8)
    ax.set_yticks(range(len(cases)), [case_label(p[0]) for p in cases], fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.text(1.0, len(cases) - 0.4, " plain", fontsize=8)
    ax.set_xlim(0, max(ratios) * 1.45)
    ax.set_xlabel("tokens/s, speculative over plain llama-cpp-python")
    ax.set_title("What speculation buys", fontsize=11)


def _draftless_panel(ax, draftless) -> None:
    """Free drafting against llama.cpp's C++ draftless modes: per workload, pyspec's lookup
    and each C++ mode, over plain decoding."""
    labels, values, colors = [], [], []
    for workload, over in draftless:
        ours = [m for m in over if not m.startswith("c++") and "before" not in m]
        modes = ours + sorted(m for m in over if m.startswith("c++"))
        for mode in modes:
            name = f"pyspec {mode}" if mode in ours else mode[4:]
            labels.append(f"{workload}: {name}")
            values.append(over[mode])
            colors.append("tab:green" if mode in ours else "tab:gray")
        labels.append("")
        values.append(0.0)
        colors.append("white")
    labels, values, colors = labels[:-1], values[:-1], colors[:-1]
    ys = range(len(labels))[::-1]
    ax.barh(list(ys), values, color=colors)
    for y, v in zip(ys, values):
        if v:
            ax.text(v, y, f" {v:.2f}x", va="center", fontsize=8)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlim(0, max(values) * 1.3)
    ax.set_xlabel("decode tokens/s over plain (green: pyspec, grey: llama.cpp's C++ loop)")
    ax.set_title("Free drafts against llama.cpp's draftless modes", fontsize=11)


def _verify_panel(ax, verify) -> None:
    """What verifying costs: verify/read per k on real logits, one labelled line per model's
    vocabulary; the llama.cpp chain's cost against verify as one sentence."""
    real = [p for p in verify if p[0] == "real float32 default"] or verify
    chain = [p[4] for p in real if p[4]]
    for vocab in sorted({p[1] for p in real}):
        pts = sorted((p[2], p[3]) for p in real if p[1] == vocab)
        ax.plot([k for k, _ in pts], [r for _, r in pts], marker="o")
        ax.annotate(
            _VOCABS.get(vocab, f"V = {vocab}"),
            pts[-1],
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("draft length k (a verify reads k + 1 rows)")
    ax.set_ylabel("fused verify time / one read of the same rows")
    ax.set_title("What one verify costs (real logits)", fontsize=11)
    if chain:
        ax.text(
            0.02,
            0.04,
            f"llama.cpp's sampler chain on the same rows:\n"
            f"{min(chain):.0f}-{max(chain):.0f}x the verify's time",
            transform=ax.transAxes,
            va="bottom",
            fontsize=8,
        )


def render(benchmarks, machines, dates, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verify, generation = verify_points(benchmarks), generation_points(benchmarks)
    draftless = draftless_points(benchmarks)
    # One panel per question, in the order a reader asks them.
    panels = [
        (draw, points)
        for draw, points in (
            (_speedup_panel, generation),
            (_draftless_panel, draftless),
            (_verify_panel, verify),
        )
        if points
    ]
    if not panels:
        raise SystemExit("report: no verify ratios or generation rates in these files")
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.6), squeeze=False)
    for ax, (draw, points) in zip(axes[0], panels):
        draw(ax, points)
    fig.suptitle(f"pyspec, measured {', '.join(dates)} on {'; '.join(machines)}", fontsize=9)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    print(
        f"report: wrote {output} ({len(verify)} verify points, {len(generation)} generation "
        f"cases, {len(draftless)} draftless workloads)"
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
    if args.allow_empty and not (
        verify_points(benchmarks) or generation_points(benchmarks) or draftless_points(benchmarks)
    ):
        print(
            "report: nothing to plot in these files (no verify ratios or generation rates); "
            "no picture written"
        )
        return 0
    render(benchmarks, machines, dates, Path(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
