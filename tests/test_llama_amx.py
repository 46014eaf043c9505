"""The AMX build (``pyspec install-llama`` on a CPU with AMX) computes what the kernels without
AMX compute, within a measured bound, with any number of threads.

Each model's rows are computed three ways, each in a process of its own
(pyspec.testing.build_probe): the installed AMX build with its AMX weight buffers; the same
build with ggml's extra buffer types off (no AMX, no repacking: the generic kernels); and,
when it is in pyspec's build cache, the non-AMX build (``install-llama --no-amx
--build-only``, which .ci/run makes on AMX CPUs). Every one of them is taken one token per
decode and in one batch.

The bound is measured, not assumed, on the same rows: one build's own batch shapes (one
token per decode against one batch) already differ, because other kernels run for them;
that difference, ``within``, is what two correct computations of these rows differ by here.
AMX against another kernel may differ by at most ``MARGIN x within`` (the larger of the two
computations' own), and a greedy pick may differ only where the reference's top two are
closer than ``MARGIN x`` the within-build difference over the top 16 tokens. Measured on an
Intel Xeon (AVX-512, AMX), largest |AMX - non-AMX build| over a 53-token text against
within: Qwen 1.5B 0.63 against 0.64, Qwen 0.5B 0.65 against 0.47, Gemma 270M 3.10 against
2.43 (Gemma's 262k-token rows have the largest logits).

Skipped (with the reason) on CPUs without AMX and where the installed build is not an AMX
build with pyspec's fix.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyspec.testing import build_probe
from pyspec.testing.models import ensure_model
from pyspec.tools.install_llama import amx_capable, cached_wheel, cpu_flags, installed_amx_fix

TEXT = (
    'def merge_sorted(a, b):\n    """Merge two sorted lists into one sorted list."""\n'
    "    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
)
MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma3-270m")


def _installed_build_has_amx() -> bool:
    from pyspec.llama.runtime.guard import build_features, system_info

    return build_features(system_info()).get("AMX_INT8") == "1"


pytestmark = [
    pytest.mark.skipif(
        not amx_capable(cpu_flags()),
        reason="this CPU reports no AMX (amx_tile and amx_int8): the AMX path cannot run here",
    ),
    pytest.mark.skipif(
        amx_capable(cpu_flags()) and not _installed_build_has_amx(),
        reason="the installed llama-cpp-python is not an AMX build "
        "(`pyspec install-llama` makes one on this CPU)",
    ),
]


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """model -> {"amx" | "generic" | "no-amx build": (single rows, batched rows)}."""
    assert installed_amx_fix() > 0, "an AMX build without pyspec's fix is running the tests"
    other = cached_wheel(amx=False)
    other_dir = (
        build_probe.unpack_wheel(other, tmp_path_factory.mktemp("no-amx-build"))
        if other is not None
        else None
    )
    out = {}
    for name in MODELS:
        path = str(ensure_model(name))
        runs = {"amx": ([], None), "generic": (["--no-extra-bufts"], None)}
        if other_dir is not None:
            runs["no-amx build"] = ([], other_dir)
        out[name] = {}
        for label, (extra, build_dir) in runs.items():
            target = tmp_path_factory.mktemp("rows") / f"{label.replace(' ', '-')}.npz"
            info = build_probe.run(
                ["rows", "--model", path, "--text", TEXT, "--out", target, *extra],
                build_dir=build_dir,
            )
            assert ("AMX_INT8 = 1" in info["system_info"]) == (label != "no-amx build"), info
            rows = np.load(target)
            out[name][label] = (rows["single"], rows["batched"])
    return out


MARGIN = 2.0


def _within(runs: tuple) -> tuple:
    """(largest |single - batched|, over each row's top 16 tokens) of one computation."""
    single, batched = runs
    d = np.abs(single - batched)
    top = np.argsort(-batched, axis=1)[:, :16]
    return float(d.max()), float(np.take_along_axis(d, top, 1).max())


def _check_rows(rows, reference, bound: float, tie_bound: float, what: str) -> float:
    assert rows.shape == reference.shape and np.isfinite(rows).all(), what
    d = float(np.max(np.abs(rows - reference)))
    assert d <= bound, (
        f"{what}: largest logit difference {d:.3f} is above the bound "
        f"{bound:.3f} ({MARGIN} x what this build's own batch shapes differ by)"
    )
    for r in np.nonzero(rows.argmax(1) != reference.argmax(1))[0]:
        a, b = int(reference[r].argmax()), int(rows[r].argmax())
        gap = float(reference[r, a] - reference[r, b])
        assert gap <= tie_bound, (
            f"{what}, row {r}: greedy pick {b} instead of {a} at a gap "
            f"of {gap:.3f} (near-tie bound {tie_bound:.3f})"
        )
    return d


@pytest.mark.parametrize("name", MODELS)
def test_amx_rows_agree_with_the_kernels_without_amx(probed, name):
    runs = probed[name]
    amx_single, amx_batched = runs["amx"]
    report = []
    for label in [label for label in runs if label != "amx"]:
        within = [max(a, b) for a, b in zip(_within(runs["amx"]), _within(runs[label]))]
        bound, tie_bound = MARGIN * within[0], MARGIN * within[1]
        single, batched = runs[label]
        d1 = _check_rows(
            amx_single, single, bound, tie_bound, f"{name} one-token decodes, AMX against {label}"
        )
        d2 = _check_rows(
            amx_batched, batched, bound, tie_bound, f"{name} batched, AMX against {label}"
        )
        report.append(f"{label}: one-token {d1:.3f}, batched {d2:.3f} (within {within[0]:.3f})")
        # The comparison can fail: a row shifted by a planted error of the bound's size does.
        planted = amx_batched.copy()
        middle = len(planted) // 2
        planted[middle, int(planted[middle].argmax())] -= 2 * bound
        with pytest.raises(AssertionError):
            _check_rows(planted, batched, bound, tie_bound, "planted")
    print(f"{name}: largest |AMX - other|: " + "; ".join(report))


def test_the_no_amx_build_is_compared_where_ci_builds_it(probed):
    if "no-amx build" not in probed[MODELS[0]]:
        pytest.skip(
            "the non-AMX build is not in pyspec's build cache (`python3 -m pyspec "
            "install-llama --no-amx --build-only` makes it; .ci/run does on AMX CPUs)"
        )
    assert all("no-amx build" in runs for runs in probed.values())


def test_any_thread_count_and_a_changing_openmp_team(batch_noise):
    path = str(ensure_model("qwen2.5-coder-0.5b"))
    noise = batch_noise(path)
    result = build_probe.run(["threads", "--model", path, "--text", TEXT])
    assert "AMX_INT8 = 1" in result["system_info"]
    by_threads = result["largest_difference_by_threads"]
    assert len(by_threads) == 4  # 1, 2 and 2 x cores threads ran, then 1 again
    for n_threads, d in by_threads.items():
        assert d <= noise.row_bound, f"{n_threads} threads: rows differ by {d:.3f} from 1 thread"
