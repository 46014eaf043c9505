"""The AMX build of llama-cpp-python against the non-AMX build: what a decode of n tokens
costs (n = 1, 2, 3, 5, 9, 17: a plain round and verify passes of 1-16 drafts) and what
plain one-token decoding costs, per model.

Both builds come from ``pyspec install-llama`` (the installed one, and the other from its
build cache: ``install-llama --no-amx --build-only`` or ``--amx --build-only``). Each
measurement runs in a process of its own (pyspec.testing.build_probe), and the builds
alternate (A B A B ...) so that drifting machine load hits both; each process takes the
median of its repetitions, and the report gives the median over rounds and the ratio of
the two builds measured in this run. Nothing is asserted about speed.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyspec.testing import build_probe
from pyspec.testing.models import ensure_model
from pyspec.tools.install_llama import amx_capable, cached_wheel, cpu_flags

SIZES = (1, 2, 3, 5, 9, 17)
ROUNDS = 3
MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma3-270m")

pytestmark = pytest.mark.skipif(
    not amx_capable(cpu_flags()), reason="this CPU reports no AMX: there is one build only"
)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """label -> PYTHONPATH dir (None: the installed build)."""
    from pyspec.llama.runtime.guard import build_features, system_info

    installed_amx = build_features(system_info()).get("AMX_INT8") == "1"
    other = cached_wheel(amx=not installed_amx)
    if other is None:
        pytest.skip(
            f"the {'non-' if installed_amx else ''}AMX build is not cached: "
            f"`python3 -m pyspec install-llama --{'no-' if installed_amx else ''}amx "
            f"--build-only` makes it"
        )
    other_dir = build_probe.unpack_wheel(other, tmp_path_factory.mktemp("other-build"))
    amx, no_amx = (None, other_dir) if installed_amx else (other_dir, None)
    return {"amx": amx, "no-amx": no_amx}


@pytest.mark.parametrize("name", MODELS)
def bench_batch_costs_amx_against_no_amx(benchmark, builds, name):
    path = str(ensure_model(name))
    samples = {label: [] for label in builds}

    def measure():
        for _ in range(ROUNDS):
            for label, build_dir in builds.items():  # alternating: A B A B ...
                samples[label].append(
                    build_probe.run(
                        [
                            "costs",
                            "--model",
                            path,
                            "--threads",
                            "2",
                            "--sizes",
                            ",".join(map(str, SIZES)),
                        ],
                        build_dir=build_dir,
                    )
                )

    benchmark.pedantic(measure, rounds=1, iterations=1)
    table = {}
    for label, runs in samples.items():
        table[label] = {
            str(n): float(np.median([r["ms_per_batch"][str(n)] for r in runs])) for n in SIZES
        }
        table[label]["plain"] = float(np.median([r["plain_ms_per_token"] for r in runs]))
    ratios = {key: table["amx"][key] / table["no-amx"][key] for key in table["amx"]}
    benchmark.extra_info.update(
        {"model": name, "ms": table, "amx_over_no_amx": ratios, "rounds": ROUNDS}
    )
    lines = [
        f"{name}: ms per decode of n tokens (median of {ROUNDS} alternating rounds)",
        "  n        " + "".join(f"{n:>8}" for n in SIZES) + "   plain/token",
    ]
    for label in table:
        lines.append(
            f"  {label:<9}"
            + "".join(f"{table[label][str(n)]:8.1f}" for n in SIZES)
            + f"   {table[label]['plain']:8.1f}"
        )
    lines.append(
        "  amx/no-amx"
        + "".join(f"{ratios[str(n)]:8.2f}" for n in SIZES)
        + f"   {ratios['plain']:8.2f}"
    )
    for label in table:
        lines.append(
            f"  {label} cost(n)/cost(1): "
            + ", ".join(f"{n}: {table[label][str(n)] / table[label]['1']:.2f}" for n in SIZES[1:])
        )
    print("\n" + "\n".join(lines))
