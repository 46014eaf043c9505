#!/usr/bin/env bash
# The GPU checks of pyspec's CUDA back end, in one call on a machine with an NVIDIA GPU and
# no internet: at most BUDGET seconds (default 540) in all; steps run in order of value
# (build, identity check, benchmark, pytest, memcheck, FlashInfer), each cut to what is left. Writes everything under $OUT:
#   env.txt          what the machine has (GPU, driver, nvcc, cmake, Python packages)
#   build.log        the build (PYSPEC_CUDA=ON, sm_90)
#   check.json       CPU-vs-GPU token identity (C API; no Python packages needed), device
#                    errors, CUDA graph capture
#   pytest.txt       tests/test_cuda.py (needs numpy + cffi + pytest; torch or cupy for the
#                    device arrays; scipy for the chi-square tests)
#   bench.json       achieved bandwidth vs a device-to-device copy
#   memcheck.txt     compute-sanitizer's memcheck over the identity check (where it runs)
#   flashinfer.json  FlashInfer's chain_speculative_sampling on the same shapes (if installed)
#   summary.txt      one line per step
# Every step says what it does; optional steps that fail are reported and skipped.
# Without nvcc on the device machine, run benchmarks/device/prebuild.sh first where nvcc
# exists and carry build/device-prebuilt along.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/build/device-out}
. benchmarks/device/_steps.sh  # BUDGET, lim, step, note
PY=${PYTHON:-python3}

step "environment"
{
  echo "date: $(date -u +%FT%T+00:00)"; uname -a
  # One line each for keep_device_results.py (the table above is for people).
  echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "host cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1); family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p'); $(nproc) CPUs"
  nvidia-smi 2>&1 | head -20 || echo "no nvidia-smi"
  command -v nvcc && nvcc --version | tail -2 || echo "no nvcc in PATH"
  ls -d /usr/local/cuda*/bin/nvcc 2>/dev/null
  command -v cmake && cmake --version | head -1 || echo "no cmake"
  command -v ninja || echo "no ninja"
  command -v gcc && gcc --version | head -1
  command -v $PY && $PY --version
  $PY - <<'PYEOF' 2>&1
import importlib
for name in ("numpy", "cffi", "pytest", "scipy", "torch", "cupy", "flashinfer", "triton"):
    try:
        m = importlib.import_module(name)
        extra = ""
        if name == "torch":
            extra = f" cuda={m.version.cuda} available={m.cuda.is_available()}"
        print(f"{name}: {getattr(m, '__version__', '?')}{extra}")
    except Exception as exc:
        print(f"{name}: missing ({type(exc).__name__}: {exc})")
PYEOF
} 2>&1 | tee "$OUT/env.txt"

NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
BUILD=""
step "build (PYSPEC_CUDA=ON, sm_90)"
: >"$OUT/build.log"
if [ -n "$NVCC" ] && command -v cmake >/dev/null && [ -z "${FORCE_HAND_BUILD:-}" ]; then
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  if cmake -S . -B build/device "${GEN[@]}" -DPYSPEC_CUDA=ON -DPYSPEC_BUILD_TESTS=ON \
        -DCMAKE_CUDA_COMPILER="$NVCC" "-DCMAKE_CUDA_ARCHITECTURES=90-real" >"$OUT/build.log" 2>&1 &&
     timeout "$(lim 240)" cmake --build build/device -j"$(nproc)" >>"$OUT/build.log" 2>&1 &&
     "$NVCC" -std=c++17 -O2 -Icsrc benchmarks/device/device_check.cu -Lbuild/device -lpyspec \
        -cudart static -Xlinker -rpath="$ROOT/build/device" -o build/device/device_check >>"$OUT/build.log" 2>&1; then
    BUILD=build/device; note "build: ok (cmake, $NVCC)"
  else
    note "build: cmake build FAILED (see build.log)"; tail -30 "$OUT/build.log"
  fi
elif [ -n "$NVCC" ]; then
  note "build: no cmake; compiling by hand with nvcc + gcc"
  B=build/device-hand; rm -rf $B; mkdir -p $B/obj
  DEFS="-DPYSPEC_BUILD -DPYSPEC_SHARED -DPYSPEC_WITH_CUDA -DPYSPEC_VERSION_STRING=\"0.1.0\" -Icsrc"
  ok=1
  for f in errors penalties row_scan distribution verify verifier; do
    gcc -O3 -fno-math-errno -fPIC -fopenmp -fvisibility=hidden $DEFS -c csrc/$f.c -o $B/obj/$f.o >>"$OUT/build.log" 2>&1 || ok=0
  done
  for f in csrc/cuda/*.cu; do
    "$NVCC" -O3 -fmad=false -std=c++17 -arch=sm_90 -Xcompiler -fPIC,-fvisibility=hidden $DEFS \
      -c "$f" -o $B/obj/$(basename "$f" .cu).cu.o >>"$OUT/build.log" 2>&1 || ok=0
  done
  "$NVCC" -shared -o $B/libpyspec.so $B/obj/*.o -cudart static -lgomp -ldl -lrt -lpthread >>"$OUT/build.log" 2>&1 || ok=0
  "$NVCC" -std=c++17 -O2 -Icsrc benchmarks/device/device_check.cu -L$B -lpyspec -cudart static \
     -Xlinker -rpath="$ROOT/$B" -o $B/device_check >>"$OUT/build.log" 2>&1 || ok=0
  gcc -O2 -Icsrc $(ls tests/c/test_*.c | grep -v '/test_draw\.c$') -L$B -lpyspec -lm -Wl,-rpath,"$ROOT/$B" -o $B/test_pyspec_c >>"$OUT/build.log" 2>&1 || true
  if [ $ok = 1 ]; then BUILD=$B; note "build: ok (by hand)"; else note "build: hand build FAILED (see build.log)"; tail -30 "$OUT/build.log"; fi
fi
if [ -z "$BUILD" ] && [ -f build/device-prebuilt/libpyspec.so ]; then
  BUILD=build/device-prebuilt; note "build: using the carried build/device-prebuilt"
fi
if [ -z "$BUILD" ]; then
  note "build: none available; stopping"; exit 1
fi
LIB=$ROOT/$BUILD/libpyspec.so
export LD_LIBRARY_PATH="$ROOT/$BUILD:${LD_LIBRARY_PATH:-}"

step "C tests (CPU path, this build)"
if [ -x $BUILD/test_pyspec_c ]; then
  timeout "$(lim 60)" $BUILD/test_pyspec_c >"$OUT/ctest.txt" 2>&1 && note "C tests: ok" || note "C tests: FAILED (ctest.txt)"
  tail -3 "$OUT/ctest.txt"
fi

step "CPU-vs-GPU identity, device errors, graph capture (device_check check)"
timeout "$(lim 170)" $BUILD/device_check check "$OUT/check.json" >"$OUT/check.txt" 2>&1
rc=$?
tail -40 "$OUT/check.txt"
note "device_check check: rc=$rc (0: GPU equals the rules and, greedy, the CPU; 1: mismatches or errors, see check.json; 2: no device or setup failure)"

step "bandwidth benchmark (device_check bench)"
timeout "$(lim 150)" $BUILD/device_check bench "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
note "device_check bench: rc=$?"
cat "$OUT/bench.txt"

step "tests/test_cuda.py (pytest)"
if $PY -c "import numpy, cffi, pytest" 2>/dev/null; then
  (cd tests && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYSPEC_LIBRARY="$LIB" PYSPEC_EXPECT_CUDA=1 timeout "$(lim 150)" \
     $PY ../benchmarks/device/_pytest_here.py -q -p no:cacheprovider -rs --maxfail=20 test_cuda.py \
     --junitxml="$OUT/pytest.xml" >"$OUT/pytest.txt" 2>&1)
  rc=$?
  tail -40 "$OUT/pytest.txt"
  note "pytest test_cuda.py: rc=$rc ($(tail -1 "$OUT/pytest.txt"))"
  (cd tests && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYSPEC_LIBRARY="$LIB" timeout "$(lim 40)" \
     $PY ../benchmarks/device/_pytest_here.py -q -p no:cacheprovider test_bad_input.py test_robustness.py test_rng.py test_draw_order.py >"$OUT/pytest_cpu.txt" 2>&1)
  note "pytest CPU subset with this build: rc=$? ($(tail -1 "$OUT/pytest_cpu.txt"))"
else
  note "pytest: skipped (numpy, cffi or pytest missing)"
fi

step "compute-sanitizer memcheck over the identity check (optional)"
if command -v compute-sanitizer >/dev/null; then
  timeout "$(lim 120)" compute-sanitizer --tool memcheck --print-limit 20 $BUILD/device_check check \
    "$OUT/check_memcheck.json" >"$OUT/memcheck.txt" 2>&1
  rc=$?
  note "memcheck: rc=$rc ($(grep -h 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1))"
else
  note "memcheck: skipped (no compute-sanitizer)"
fi

step "FlashInfer chain_speculative_sampling (optional)"
timeout "$(lim 90)" $PY benchmarks/device/bench_flashinfer.py "$OUT/flashinfer.json" >"$OUT/flashinfer.txt" 2>&1
note "flashinfer: rc=$? ($(tail -1 "$OUT/flashinfer.txt"))"

step "summary"
cat "$SUMMARY"
