"""The llama-cpp-python build pyspec installs (no AMX path, this CPU's SIMD levels), the
guard against a build that would crash, and ``pyspec doctor``."""

import platform
import sys
import tarfile
from pathlib import Path

import pytest
from pyspec_cli import run_pyspec

from pyspec.llama.runtime.guard import (
    UnsafeLlamaBuildError,
    amx_crash_reason,
    build_features,
    check_llama_build,
)
from pyspec.tools.install_llama import (
    AMX_FIX_VERSION,
    AMX_OPTIONS,
    SIMD_CEILINGS,
    LlamaBuildError,
    amx_enabled,
    cpu_flags,
    default_amx,
    derived_cmake_args,
    installed_amx_fix,
    plan_cmake_args,
    wheel_key,
)

SAPPHIRE_RAPIDS = frozenset(
    "sse4_2 avx avx2 bmi2 fma f16c avx_vnni avx512f avx512cd avx512vl "
    "avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16 amx_tile "
    "amx_int8 amx_bf16".split()
)
ZEN3 = frozenset("sse4_2 avx avx2 bmi2 fma f16c".split())
OLD_X86 = frozenset("sse4_2 avx".split())
AMX_INFO = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)


def _defines(args):
    return dict(a[2:].split("=", 1) for a in args)


def test_the_derived_flags_follow_the_cpu_and_never_enable_amx():
    amx = _defines(derived_cmake_args(SAPPHIRE_RAPIDS, "x86_64"))
    assert amx["GGML_NATIVE"] == "OFF"
    assert all(amx[o] == "OFF" for o in AMX_OPTIONS)
    assert amx["GGML_AVX512"] == amx["GGML_AVX512_VNNI"] == amx["GGML_AVX_VNNI"] == "ON"
    zen = _defines(derived_cmake_args(ZEN3, "x86_64"))
    assert zen["GGML_AVX2"] == zen["GGML_FMA"] == zen["GGML_F16C"] == "ON"
    assert zen["GGML_AVX512"] == zen["GGML_AVX512_VBMI"] == "OFF"
    # A CPU without AVX2: ggml's GGML_NATIVE=OFF defaults would switch AVX2/FMA/F16C on.
    old = _defines(derived_cmake_args(OLD_X86, "x86_64"))
    assert old["GGML_AVX"] == "ON"
    assert old["GGML_AVX2"] == old["GGML_FMA"] == old["GGML_F16C"] == old["GGML_BMI2"] == "OFF"
    # AVX-512 needs all five subsets that ggml compiles with.
    partial = _defines(derived_cmake_args(ZEN3 | {"avx512f", "avx512cd"}, "x86_64"))
    assert partial["GGML_AVX512"] == "OFF"
    assert derived_cmake_args(SAPPHIRE_RAPIDS, "aarch64") == []  # llama.cpp's own defaults


def test_a_simd_ceiling_builds_an_older_cpus_kernels_and_never_adds_a_level():
    """--simd avx2 on an AMX Xeon: exactly the options a Zen 3 derives (x86-64-v3), AMX off;
    on a CPU without AVX2 the ceiling switches nothing on; avx512 is all but AMX. The key
    differs, so the ceiling's wheel is cached beside the full one."""
    avx2 = derived_cmake_args(SAPPHIRE_RAPIDS, "x86_64", simd="avx2")
    assert avx2 == derived_cmake_args(ZEN3, "x86_64")
    on = {k for k, v in _defines(avx2).items() if v == "ON"}
    assert on == set(SIMD_CEILINGS["avx2"])
    assert derived_cmake_args(OLD_X86, "x86_64", simd="avx2") == derived_cmake_args(
        OLD_X86, "x86_64"
    )
    assert derived_cmake_args(SAPPHIRE_RAPIDS, "x86_64", simd="avx512") == derived_cmake_args(
        SAPPHIRE_RAPIDS, "x86_64"
    )
    planned = plan_cmake_args("-DGGML_CUDA=on", SAPPHIRE_RAPIDS, "x86_64", simd="avx2")
    assert planned == avx2 + ["-DGGML_CUDA=on"] and not amx_enabled(planned)
    assert wheel_key(planned) != wheel_key(plan_cmake_args("-DGGML_CUDA=on", SAPPHIRE_RAPIDS))
    with pytest.raises(LlamaBuildError, match="leaves AMX out"):
        plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64", amx=True, simd="avx2")
    with pytest.raises(LlamaBuildError, match="not a SIMD ceiling"):
        plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64", simd="sse2")
    with pytest.raises(LlamaBuildError, match="x86 levels"):
        plan_cmake_args("", SAPPHIRE_RAPIDS, "aarch64", simd="avx2")


def test_the_levels_a_build_leaves_out_are_named_and_the_doctor_says_so():
    from pyspec.llama.runtime.build_info import levels_left_out
    from pyspec.llama.runtime.guard import system_info

    avx2_only = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | REPACK = 1 | "
    assert levels_left_out(build_features(AMX_INFO), SAPPHIRE_RAPIDS) == []
    assert levels_left_out(build_features(avx2_only), SAPPHIRE_RAPIDS) == ["AMX", "AVX-512"]
    assert levels_left_out(build_features(avx2_only), ZEN3) == []
    assert levels_left_out(build_features(avx2_only), OLD_X86) == []
    left_out = levels_left_out(build_features(system_info()), cpu_flags())
    out = run_pyspec("doctor")
    assert ("llama.cpp SIMD levels" in out.stdout) == bool(left_out), out.stdout
    if left_out:
        assert f"leaves out {', '.join(left_out)}" in out.stdout


def test_this_machines_flags_are_read():
    flags = cpu_flags()
    if sys.platform.startswith("linux"):
        assert flags, "no CPU flags read from /proc/cpuinfo"
    assert cpu_flags("processor : 0\nflags : fpu avx2 amx_int8\n") == {"fpu", "avx2", "amx_int8"}


def test_user_cmake_args_are_appended_and_dangerous_ones_refused():
    args = plan_cmake_args("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90", ZEN3, "x86_64")
    assert args[-2:] == ["-DGGML_CUDA=on", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    assert "-DGGML_NATIVE=OFF" in args
    for bad in ("-DGGML_NATIVE=ON", "-DGGML_AMX_INT8=on", "-DGGML_AMX_TILE:BOOL=1"):
        with pytest.raises(LlamaBuildError, match="AMX"):
            plan_cmake_args(bad, ZEN3, "x86_64")
    # The wheel's cache key changes with the flags: a wheel built with others is never reused.
    assert wheel_key(plan_cmake_args("", ZEN3, "x86_64")) != wheel_key(
        plan_cmake_args("-DGGML_CUDA=on", ZEN3, "x86_64")
    )
    assert wheel_key(plan_cmake_args("", ZEN3, "x86_64")) != wheel_key(
        plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64")
    )


def test_an_amx_build_is_asked_for_explicitly_and_keyed_apart():
    amx = plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64", amx=True)
    defines = _defines(amx)
    assert defines["GGML_AMX_TILE"] == defines["GGML_AMX_INT8"] == defines["GGML_AMX_BF16"] == "ON"
    assert defines["GGML_NATIVE"] == "OFF" and defines["GGML_AVX512"] == "ON"
    assert amx_enabled(amx) and not amx_enabled(plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64"))
    no_bf16 = _defines(plan_cmake_args("", SAPPHIRE_RAPIDS - {"amx_bf16"}, "x86_64", amx=True))
    assert no_bf16["GGML_AMX_BF16"] == "OFF" and no_bf16["GGML_AMX_INT8"] == "ON"
    # the user's AMX options are fine once the fix is applied; GGML_NATIVE=ON never is
    assert plan_cmake_args("-DGGML_AMX_INT8=on", SAPPHIRE_RAPIDS, "x86_64", amx=True)
    with pytest.raises(LlamaBuildError, match="GGML_NATIVE=ON"):
        plan_cmake_args("-DGGML_NATIVE=ON", SAPPHIRE_RAPIDS, "x86_64", amx=True)
    with pytest.raises(LlamaBuildError, match="reports no AMX"):
        plan_cmake_args("", ZEN3, "x86_64", amx=True)
    with pytest.raises(LlamaBuildError, match="--amx"):  # the refusal names the way to it
        plan_cmake_args("-DGGML_AMX_INT8=on", SAPPHIRE_RAPIDS, "x86_64")
    assert wheel_key(amx) != wheel_key(plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64"))


def test_the_amx_path_is_the_default_exactly_where_the_cpu_runs_it():
    assert default_amx(SAPPHIRE_RAPIDS, "x86_64")
    assert not default_amx(ZEN3, "x86_64")
    assert not default_amx(SAPPHIRE_RAPIDS - {"amx_int8"}, "x86_64")
    assert not default_amx(SAPPHIRE_RAPIDS, "aarch64")


def test_the_amx_key_changes_with_the_fix(monkeypatch):
    import pyspec.tools.install_llama as build

    amx = plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64", amx=True)
    before = wheel_key(amx)
    monkeypatch.setattr(build, "AMX_FIX_VERSION", build.AMX_FIX_VERSION + 1)
    assert wheel_key(amx) != before  # a wheel with an older fix is never reused
    plain = plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64")
    assert wheel_key(plain) == wheel_key(plain)


@pytest.mark.parametrize("kernel", ["q4k_kernel", "q6k_kernel"])
def test_the_kernels_key_the_x86_builds_with_avx2(monkeypatch, kernel):
    """pyspec's Q4_K and Q6_K kernels go into x86 builds with AVX2, FMA and F16C (the VNNI
    variant or the AVX2 one); each one's version is in their key (a wheel with an older kernel
    is never reused), and other builds keep the key they had."""
    from pyspec.llama.runtime import x86_kernels

    vnni = plan_cmake_args("", SAPPHIRE_RAPIDS, "x86_64")  # (--no-amx: AVX-512 with VNNI)
    avx2 = plan_cmake_args("", ZEN3, "x86_64")
    arm = plan_cmake_args("", frozenset(), "aarch64")
    assert x86_kernels.applies_to(vnni) and x86_kernels.applies_to(avx2)
    assert not x86_kernels.applies_to(arm)
    both = {"q4k_kernel", "q6k_kernel"}
    assert set(x86_kernels.versions(vnni)) == set(x86_kernels.versions(avx2)) == both
    assert x86_kernels.versions(arm) == {}
    vnni_before, avx2_before, arm_before = wheel_key(vnni), wheel_key(avx2), wheel_key(arm)
    module = x86_kernels.KERNELS[kernel]
    monkeypatch.setattr(module, "KERNEL_VERSION", module.KERNEL_VERSION + 1)
    assert wheel_key(vnni) != vnni_before
    assert wheel_key(avx2) != avx2_before
    assert wheel_key(arm) == arm_before


def test_the_installed_build_has_the_kernels_exactly_where_they_apply():
    """The Q4_K and Q6_K kernels' markers in the installed library: both, at the versions
    the build's flags call for, or neither (a build without AVX2, FMA and F16C)."""
    from pyspec.llama.runtime import x86_kernels
    from pyspec.tools.install_llama import installed_build

    build = installed_build()
    if build is None:
        pytest.skip("the installed llama-cpp-python was not built by pyspec install-llama")
    assert x86_kernels.installed_versions() == x86_kernels.versions(build["cmake_args"])


def test_the_guard_names_the_problem_and_the_fix():
    assert build_features(AMX_INFO)["AMX_INT8"] == "1"
    reason = amx_crash_reason(AMX_INFO, SAPPHIRE_RAPIDS)
    assert "#20824" in reason and "pyspec install-llama" in reason
    assert amx_crash_reason(AMX_INFO, ZEN3) == ""  # the AMX buffer is only used on AMX CPUs
    assert amx_crash_reason(AMX_INFO.replace("AMX_INT8 = 1 | ", ""), SAPPHIRE_RAPIDS) == ""
    assert amx_crash_reason(AMX_INFO, SAPPHIRE_RAPIDS, fixed=True) == ""  # install-llama --amx


def test_the_guard_passes_the_installed_build_on_this_machine():
    # The installed llama-cpp-python is the one `pyspec install-llama` built (CI installs it
    # that way), so nothing may be refused here; and the guard reads the real system info.
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert build_features(info), info
    if build_features(info).get("AMX_INT8") == "1":  # only pyspec's own AMX build (--amx)
        assert installed_amx_fix() > 0
    check_llama_build()


def test_the_guard_refuses_before_the_model_loads(monkeypatch, tmp_path):
    import pyspec.llama.runtime.guard as guard
    from pyspec.llama import SpeculativeLlama

    monkeypatch.setattr(guard, "system_info", lambda: AMX_INFO)
    monkeypatch.setattr(guard, "cpu_flags", lambda: SAPPHIRE_RAPIDS)
    monkeypatch.setattr(guard, "installed_amx_fix", lambda: 0)  # an AMX build without the fix
    missing = tmp_path / "never-loaded.gguf"  # loading it would fail differently
    with pytest.raises(UnsafeLlamaBuildError, match="install-llama"):
        SpeculativeLlama(str(missing))
    monkeypatch.setattr(guard, "installed_amx_fix", lambda: 1)  # install-llama --amx
    with pytest.raises(ValueError, match="(?i)model path does not exist|no such file"):
        SpeculativeLlama(str(missing))
    monkeypatch.setattr(guard, "installed_amx_fix", lambda: 0)
    monkeypatch.setenv("PYSPEC_ALLOW_AMX", "1")
    with pytest.raises(ValueError, match="(?i)model path does not exist|no such file"):
        SpeculativeLlama(str(missing))


def test_install_llama_dry_run_prints_the_plan():
    has_amx = {"amx_tile", "amx_int8"} <= cpu_flags()
    fix_line = f"fix (version {AMX_FIX_VERSION}) will be applied"
    out = run_pyspec("install-llama", "--dry-run")  # the default: AMX exactly where the CPU has it
    assert out.returncode == 0, out.stderr
    assert f"-DGGML_AMX_INT8={'ON' if has_amx else 'OFF'}" in out.stderr and "wheel:" in out.stderr
    assert (fix_line in out.stderr) == has_amx
    assert (
        "AMX: on (this CPU reports amx_tile and amx_int8"
        if has_amx
        else "AMX: off (this CPU reports no AMX)"
    ) in out.stderr
    no_amx = run_pyspec("install-llama", "--dry-run", "--no-amx")
    assert no_amx.returncode == 0 and "-DGGML_AMX_INT8=OFF" in no_amx.stderr
    assert fix_line not in no_amx.stderr and "AMX: off (as asked)" in no_amx.stderr
    refused = run_pyspec(
        "install-llama", "--dry-run", "--no-amx", env={"CMAKE_ARGS": "-DGGML_NATIVE=ON"}
    )
    assert refused.returncode == 1 and "GGML_NATIVE=ON" in refused.stderr
    ceiling = run_pyspec("install-llama", "--dry-run", "--simd", "avx2")
    if platform.machine() in ("x86_64", "AMD64"):
        assert ceiling.returncode == 0, ceiling.stderr
        assert "-DGGML_AVX512=OFF" in ceiling.stderr and "-DGGML_AMX_INT8=OFF" in ceiling.stderr
        assert "AMX: off (--simd avx2 leaves it out)" in ceiling.stderr
        assert "SIMD: at most avx2" in ceiling.stderr and fix_line not in ceiling.stderr
        refused_amx = run_pyspec("install-llama", "--dry-run", "--simd", "avx2", "--amx")
        assert refused_amx.returncode == 1
        assert "leaves AMX out" in refused_amx.stderr
    both = run_pyspec("install-llama", "--amx", "--no-amx")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    amx = run_pyspec("install-llama", "--dry-run", "--amx")
    if has_amx:
        assert amx.returncode == 0, amx.stderr
        assert "-DGGML_AMX_INT8=ON" in amx.stderr and fix_line in amx.stderr
    else:
        assert amx.returncode == 1 and "reports no AMX" in amx.stderr


def test_doctor_passes_here_and_fails_with_a_reason(tmp_path):
    out = run_pyspec("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    for what in (
        "pyspec self-test",
        "llama-cpp-python",
        "CUDA back end",
        "cost cache",
        "2 MB pages",
    ):
        assert what in out.stdout
    # How the machine is (no GPU here) is a note, not a warning one cannot act on.
    assert "[warn] CUDA back end" not in out.stdout, out.stdout
    # A broken cost cache is reported (and ignored), not fatal.
    costs = tmp_path / "costs"
    costs.mkdir()
    (costs / "bad.json").write_text('{"costs": {"1": NaN, "9": 12.3}}')
    out = run_pyspec("doctor", env={"PYSPEC_CACHE": str(tmp_path), "PYSPEC_COST_CACHE": "on"})
    assert "bad.json: unreadable" in out.stdout or "bad.json: batch size" in out.stdout, out.stdout
    assert "1 batch-cost file(s)" in out.stdout and "0 valid, 0 calibrated" in out.stdout, (
        out.stdout
    )
    # A model file of the wrong size is a failure, with the fix.
    models = tmp_path / "models"
    models.mkdir()
    (models / "gemma-3-270m-q4_k_m.gguf").write_bytes(b"truncated")
    out = run_pyspec("doctor", env={"PYSPEC_CACHE": str(tmp_path)})
    assert out.returncode == 1
    assert "gemma3-270m" in out.stderr and "delete it to refetch" in out.stderr
    assert "[note] model qwen2.5-coder-1.5b: not fetched yet" in out.stdout, out.stdout


def test_the_sdist_is_kept_in_one_place_and_downloaded_only_when_missing(monkeypatch, tmp_path):
    """install-llama's AMX builds and the C++ peer (benchmarks/_llama_cpp_tools.py) share one
    sdist under the build cache; a kept one is used without pip. (The peer once looked for
    the sdist where only install-llama's AMX path puts it and, on a CPU without AMX, called
    itself again forever.)"""

    from pyspec.tools import install_llama

    calls = []
    monkeypatch.setattr(
        install_llama.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or _failed()
    )
    where = install_llama.sdist_dir(tmp_path / "llama-build")
    assert where == tmp_path / "llama-build" / f"sdist-{install_llama.LLAMA_CPP_PYTHON_VERSION}"
    with pytest.raises(install_llama.LlamaBuildError, match="could not download"):
        install_llama.download_sdist(where)  # missing: pip is asked (and fails here)
    assert len(calls) == 1 and "download" in calls[0] and str(where) in calls[0]

    where.mkdir(parents=True)
    kept = where / f"llama_cpp_python-{install_llama.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    with tarfile.open(kept, "w:gz"):
        pass
    assert install_llama.download_sdist(where) == kept
    assert len(calls) == 1  # no second download


def _failed(stderr: str = ""):
    import subprocess

    return subprocess.CompletedProcess(args=[], returncode=1, stdout="", stderr=stderr)


def test_the_sdist_download_needs_no_backend_installed_and_says_why_it_failed(
    monkeypatch, tmp_path
):
    """pip reads the sdist's metadata with llama-cpp-python's build backend. With the build
    isolation off, a fresh virtual environment (no scikit-build-core) failed the download,
    and the error showed only the command (session 48). So: isolation on, the backend from
    wheels (only llama-cpp-python held to its sources), and pip's last lines in the error."""
    from pyspec.tools import install_llama

    calls = []
    said = "\n".join(f"line {i}" for i in range(30)) + "\nModuleNotFoundError: scikit_build_core"
    monkeypatch.setattr(
        install_llama.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or _failed(said)
    )
    with pytest.raises(install_llama.LlamaBuildError) as failed:
        install_llama.download_sdist(tmp_path)
    (cmd,) = calls
    assert "--no-build-isolation" not in cmd
    assert cmd[cmd.index("--no-binary") + 1] == "llama-cpp-python"
    message = str(failed.value)
    assert "pip exit 1" in message and "ModuleNotFoundError: scikit_build_core" in message
    assert "line 29" in message and "line 5\n" not in message  # the last lines only


def _sdist(path: Path, files: dict) -> Path:
    """A tar.gz holding ``files`` (name -> text) under one top directory, as an sdist does."""
    import io

    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-x/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_sdist_is_unpacked_afresh_with_the_amx_fix_only_where_asked(tmp_path):
    """One unpacker for install-llama's patched builds and the benchmarks' llama.cpp tools:
    an earlier unpacking's files are gone, the AMX fix and the Q4_K and Q6_K kernels are
    applied where asked (and only there), and an archive without one top directory is
    refused."""
    from test_llama_amx_fix import VENDORED_SHAPE
    from test_q4k_kernel import REPACK_SHAPE
    from test_q6k_kernel import SOURCE_SHAPE

    from pyspec.llama.runtime import q4k_kernel, q6k_kernel
    from pyspec.llama.runtime.amx_fix import MARKER, MMQ_PATH
    from pyspec.tools.install_llama import LlamaBuildError, unpack_sdist

    sdist = _sdist(
        tmp_path / "a.tar.gz",
        {
            str(MMQ_PATH): VENDORED_SHAPE,
            str(q4k_kernel.REPACK_PATH): REPACK_SHAPE,
            str(q6k_kernel.SOURCE_PATH): SOURCE_SHAPE,
            str(q4k_kernel.HEADER_DEST.parent / "repack.cpp"): "// x86 kernels\n",
        },
    )
    stale = tmp_path / "out" / "src" / "stale.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("left from before")
    plain = unpack_sdist(sdist, tmp_path / "out", amx_fix=False)
    assert plain == tmp_path / "out" / "src" / "llama_cpp_python-x" and not stale.exists()
    assert (plain / MMQ_PATH).read_text() == VENDORED_SHAPE
    fixed = unpack_sdist(sdist, tmp_path / "out", amx_fix=True)
    assert MARKER in (fixed / MMQ_PATH).read_text()
    assert q4k_kernel.MARKER not in (fixed / q4k_kernel.REPACK_PATH).read_text()
    assert q6k_kernel.MARKER not in (fixed / q6k_kernel.SOURCE_PATH).read_text()
    kernel = unpack_sdist(sdist, tmp_path / "out", amx_fix=False, kernels=True)
    assert q4k_kernel.MARKER in (kernel / q4k_kernel.REPACK_PATH).read_text()
    assert q6k_kernel.MARKER in (kernel / q6k_kernel.SOURCE_PATH).read_text()
    assert (kernel / q4k_kernel.HEADER_DEST).is_file() and (
        kernel / q6k_kernel.HEADER_DEST
    ).is_file()
    assert MARKER not in (kernel / MMQ_PATH).read_text()
    with tarfile.open(tmp_path / "flat.tar.gz", "w:gz") as tar:
        tar.add(stale.parent.parent / "src" / "llama_cpp_python-x", arcname="one")
        tar.add(tmp_path / "a.tar.gz", arcname="two")
    with pytest.raises(LlamaBuildError, match="one source directory"):
        unpack_sdist(tmp_path / "flat.tar.gz", tmp_path / "out", amx_fix=False)
    with tarfile.open(tmp_path / "file.tar.gz", "w:gz") as tar:  # one top entry, not a folder
        tar.add(tmp_path / "a.tar.gz", arcname="only")
    with pytest.raises(LlamaBuildError, match="one source directory"):
        unpack_sdist(tmp_path / "file.tar.gz", tmp_path / "out", amx_fix=False)
