"""``pyspec doctor``: checks the installation and says what is wrong and how to fix it.

Exit status 0 when everything pyspec needs works; 1 with the reasons otherwise. Warnings
(something that works worse than it could, with what to do) and notes (how this machine is,
nothing to do: no GPU, models not fetched yet) are printed but do not fail.
"""

from __future__ import annotations

import sys

OK, NOTE, WARN, FAIL = "ok", "note", "warn", "FAIL"


class Report:
    def __init__(self):
        self.lines = []

    def add(self, level: str, what: str, detail: str) -> None:
        self.lines.append((level, what, detail))
        print(f"[{level:>4}] {what}: {detail}", flush=True)

    @property
    def failures(self) -> list:
        return [line for line in self.lines if line[0] == FAIL]


def check_pyspec(report: Report) -> None:
    import numpy as np

    import pyspec
    from pyspec._native.ffi import library_path

    report.add(
        OK,
        "pyspec",
        f"{pyspec.__version__}, library {library_path}, SIMD path "
        f"{pyspec.SIMD}, {pyspec.default_threads()} threads per call",
    )
    # A tiny end-to-end call: the library loads, verifies and draws.
    logits = np.array([[0.0, 5.0, 1.0], [4.0, 0.0, 0.0]], dtype=np.float32)
    result = pyspec.verify(logits, [1], params=pyspec.SamplingParams.greedy_params())
    if result.n_accepted != 1 or list(result.tokens) != [1, 0]:
        report.add(
            FAIL,
            "pyspec self-test",
            f"greedy verify returned {result}, expected n_accepted 1 and tokens [1, 0]",
        )
    else:
        report.add(OK, "pyspec self-test", "greedy verify of a 2-row draft is correct")


def check_llama(report: Report) -> None:
    from pyspec.llama.runtime.build_info import levels_left_out
    from pyspec.llama.runtime.guard import amx_crash_reason, build_features
    from pyspec.tools.install_llama import (
        LLAMA_CPP_PYTHON_VERSION,
        LlamaBuildError,
        cpu_flags,
        installed_amx_fix,
        installed_build,
        installed_q4k_kernel,
        installed_q6k_kernel,
        probe_installed,
    )

    try:  # in a child process: a broken llama-cpp-python must not take the doctor down
        version, info = probe_installed()
    except LlamaBuildError as exc:
        report.add(
            FAIL, "llama-cpp-python", f"{exc}; install it with `python3 -m pyspec install-llama`"
        )
        return
    if version != LLAMA_CPP_PYTHON_VERSION:
        report.add(
            FAIL,
            "llama-cpp-python",
            f"version {version}; pyspec is built and tested "
            f"against {LLAMA_CPP_PYTHON_VERSION} "
            f"(`python3 -m pyspec install-llama`)",
        )
    else:
        report.add(OK, "llama-cpp-python", f"{version}")
    features = build_features(info)
    on = sorted(name for name, value in features.items() if value == "1")
    report.add(OK, "llama.cpp CPU features", " ".join(on) or info)
    flags = cpu_flags()  # (/proc/cpuinfo, read once for both checks below)
    left_out = levels_left_out(features, flags)
    if left_out:
        # Asked for (--no-amx, --simd) or not, the user should know: batches, and so every
        # speculative gain, cost what they cost on a CPU without these levels.
        report.add(
            WARN,
            "llama.cpp SIMD levels",
            f"the build leaves out {', '.join(left_out)}, which this CPU has (a --no-amx or "
            "--simd build, or one made for another CPU), so its batches cost what they "
            "cost without them; `python3 -m pyspec install-llama` builds for all of them",
        )
    fix = installed_amx_fix() if features.get("AMX_INT8") == "1" else 0
    reason = amx_crash_reason(info, flags, fixed=fix > 0)
    if reason:
        report.add(FAIL, "llama.cpp AMX path", reason)
    elif features.get("AMX_INT8") == "1":
        report.add(
            OK,
            "llama.cpp AMX path",
            f"on, with pyspec's tile-config fix (version {fix})"
            if fix
            else "compiled in; this CPU reports no AMX, so it never runs",
        )
    for name, kernel, weights in (
        (
            "Q4_K",
            installed_q4k_kernel(),
            "2 tokens or more of Q4_K weights (verify passes, prompts)",
        ),
        ("Q6_K", installed_q6k_kernel(), "2-32 tokens of Q6_K weights (verify passes)"),
    ):
        if kernel or {"avx2", "fma", "f16c"} <= set(flags):
            report.add(
                OK if kernel else WARN,
                f"pyspec's {name} kernel",
                f"in (version {kernel}): passes over {weights} run through it"
                if kernel
                else "not in this build, although this CPU has AVX2, FMA and F16C: its verify "
                "passes cost more than they need to; `python3 -m pyspec install-llama` builds "
                "it in",
            )
    build = installed_build()
    if build is not None:
        report.add(
            OK,
            "llama-cpp-python build",
            f"by `pyspec install-llama`: {' '.join(build.get('cmake_args', []))}",
        )
    else:
        report.add(
            WARN,
            "llama-cpp-python build",
            "not built by `pyspec install-llama` (flags unknown; fine unless it is a "
            "-march=native build used on another CPU, or an AMX build on an AMX CPU)",
        )


def check_graph_sampler(report: Report) -> None:
    """Builds (once) the in-graph sampler against the installed llama-cpp-python."""
    from pyspec.llama.graph.build import GraphSamplerUnavailable, build_graph_library

    try:
        path = build_graph_library()
    except GraphSamplerUnavailable as exc:
        report.add(
            WARN, "in-graph sampler", f"unavailable ({exc}); verify rows are sampled on the host"
        )
        return
    report.add(OK, "in-graph sampler", f"{path}")


def check_cuda(report: Report) -> None:
    import pyspec

    if not pyspec.HAS_CUDA:
        report.add(
            NOTE,
            "CUDA back end",
            "not built in (no CUDA compiler at install time); the CPU verifier is used",
        )
        return
    if pyspec.cuda_available():
        report.add(OK, "CUDA back end", "built in, and a CUDA device is usable")
    else:
        report.add(
            NOTE,
            "CUDA back end",
            "built in, but no usable CUDA device on this machine; the CPU verifier is used",
        )


def check_models(report: Report) -> None:
    from pyspec.cache import cache_dir
    from pyspec.testing.models import MODELS

    for spec in MODELS.values():
        path = cache_dir() / "models" / spec.filename
        if not path.is_file():
            report.add(
                NOTE,
                f"model {spec.name}",
                f"not fetched yet ({path}; {spec.description}); fetched on first "
                f"use or by `python3 -m pyspec.testing.models`",
            )
        elif path.stat().st_size != spec.size:
            report.add(
                FAIL,
                f"model {spec.name}",
                f"{path} has {path.stat().st_size} bytes, "
                f"expected {spec.size}: delete it to refetch",
            )
        else:
            report.add(OK, f"model {spec.name}", str(path))


def check_cost_cache(report: Report) -> None:
    from pyspec.cache import cache_dir
    from pyspec.llama.drafting import cost_cache

    if not cost_cache.cache_enabled():
        report.add(OK, "cost cache", "off (PYSPEC_COST_CACHE)")
        return
    files = sorted((cache_dir() / "costs").glob("*.json"))
    # two kinds of file: a target's batch costs, and what a draft model beside it learned
    records = [f for f in files if cost_cache.is_drafter_record(f)]
    shapes = [f for f in files if f not in records]
    read = {f: cost_cache.read_shape(f) for f in shapes}  # (shape, calibrated, problem)
    bad = [(f, read[f][2]) for f in shapes if read[f][2]]
    bad += [(f, why) for f in records for why in [cost_cache.read_drafter_record(f)[1]] if why]
    for f, why in bad:
        report.add(WARN, "cost cache", f"{f.name}: {why}; it is ignored (delete it to tidy up)")
    bad_files = {f for f, _ in bad}
    text = (
        f"{len(shapes)} batch-cost file(s) in {cache_dir() / 'costs'}, "
        f"{sum(f not in bad_files for f in shapes)} valid, "
        f"{sum(read[f][1] for f in shapes)} calibrated at every draft length "
        "(pyspec generate and serve calibrate a model and setup on first use)"
    )
    if records:
        text += (
            f"; {len(records)} draft-model record(s), "
            f"{sum(f not in bad_files for f in records)} valid"
        )
    report.add(OK, "cost cache", text)


def check_huge_pages(report: Report) -> None:
    from pyspec.llama import huge_pages

    slower = (
        "model weights stay in the 4 KB pages llama.cpp gives them, and decode slower "
        '(docs/generation.md, "The weights in 2 MB pages")'
    )
    if not huge_pages.enabled_by_env():
        report.add(WARN, "2 MB pages", f"turned off (PYSPEC_HUGE_PAGES): {slower}")
        return
    try:
        why = huge_pages.why_not_here()
    except (OSError, ValueError) as exc:  # (an optional speed-up: never a failure here)
        why = f"the trial failed ({exc})"
    if why:
        report.add(WARN, "2 MB pages", f"{why}: {slower}")
    else:
        report.add(
            OK,
            "2 MB pages",
            "pyspec moves a model's weights into them after loading it (SpeculativeLlama, "
            "pyspec generate, pyspec serve)",
        )


def main(argv=None) -> int:
    report = Report()
    for check in (
        check_pyspec,
        check_llama,
        check_graph_sampler,
        check_cuda,
        check_models,
        check_cost_cache,
        check_huge_pages,
    ):
        try:
            check(report)
        except Exception as exc:
            report.add(FAIL, check.__name__.replace("check_", ""), f"{type(exc).__name__}: {exc}")
    if report.failures:
        print(f"pyspec doctor: {len(report.failures)} problem(s):", file=sys.stderr)
        for _, what, detail in report.failures:
            print(f"  - {what}: {detail}", file=sys.stderr)
        return 1
    print("pyspec doctor: all checks passed", file=sys.stderr)
    return 0
