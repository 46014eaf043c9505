#!/usr/bin/env bash
# The in-graph sampler on a GPU (issue 11, item 6), in one call on a device machine, from
# what benchmarks/device/graph_prebuild.sh carried in build/device-graph:
#   1. llama.cpp's libllama + libggml with the CUDA back end (sm_90; GGML_CUDA=OFF makes
#      the same build for the CPU, to try the script anywhere), into the carried
#      llama_cpp package's lib/ and include/; or the carried lib-cuda.tar.xz, the same
#      build made ahead by graph_prebuild.sh --cuda-libs
#   2. libpyspec without CUDA (the in-graph path needs none of pyspec's own kernels)
#   3. benchmarks/device/graph_checks.py on the tiny model with every layer on the GPU:
#      graph against host on the same decodes (tokens, logprobs, no rows copied), a
#      generation, the per-round timing
# Builds into build/device-graph-run (the carried folder stays as carried, so it can be
# carried again) and writes under $OUT (default build/device-graph-run/out): build.log,
# graph.json, graph.txt, summary.txt. At most BUDGET seconds (default 540) in all.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
G=$ROOT/build/device-graph        # carried: read only
R=$ROOT/build/device-graph-run    # this run's builds, packages and results
OUT=${OUT:-$R/out}
mkdir -p "$R"
. benchmarks/device/_steps.sh  # BUDGET, lim, step, note
PY=${PYTHON:-python3}
CUDA=${GGML_CUDA:-ON}
JOBS=$(nproc)
GEN=""; command -v ninja >/dev/null && GEN="-G Ninja"

if [ ! -f "$G/VERSION" ] || [ ! -d "$G/include" ] || [ ! -f "$G/tiny.gguf" ]; then
  note "build/device-graph is missing or incomplete: run benchmarks/device/graph_prebuild.sh and carry it"
  exit 2
fi

step "environment"
{ nvidia-smi 2>&1 | head -15; command -v nvcc && nvcc --version | tail -1; cmake --version | head -1
  $PY --version; } >"$OUT/env.txt" 2>&1
note "python $($PY -c 'import sys; print(sys.version.split()[0])'), cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}'), GGML_CUDA=$CUDA, $JOBS cores"

step "Python packages llama_cpp and pyspec import"
missing=$($PY - <<'PYEOF'
import importlib.util
need = ["numpy", "cffi", "diskcache", "jinja2", "typing_extensions"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PYEOF
)
if [ -n "$missing" ]; then
  $PY -m pip install -q --no-index --find-links "$G/wheels" --target "$R/deps" $missing >"$OUT/pip.txt" 2>&1
  note "installed from the carried wheels into build/device-graph-run/deps: $missing (rc=$?)"
fi
rm -rf "$R/site" && cp -r "$G/site" "$R/site"
export PYTHONPATH="$ROOT:$R/site:$R/deps${PYTHONPATH:+:$PYTHONPATH}"

step "llama.cpp $(cat "$G/VERSION")'s libraries (GGML_CUDA=$CUDA)"
mkdir -p "$R/site/llama_cpp/lib" "$R/site/include"
if [ "$CUDA" = ON ] && [ -f "$G/lib-cuda.tar.xz" ]; then
  # Built ahead by graph_prebuild.sh --cuda-libs with the same flags: minutes of device time
  # saved. cuBLAS and the driver come from this machine, found by their sonames.
  tar -xJf "$G/lib-cuda.tar.xz" -C "$R/site/llama_cpp/lib"
  # Their run path is the build folder they were made in: the libraries find each other here.
  export LD_LIBRARY_PATH="$R/site/llama_cpp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $($PY -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
    if [ -e "$d/libcublas.so.13" ] || [ -e "$d/libcudart.so.13" ]; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
    fi
  done
  note "llama.cpp: the carried lib-cuda.tar.xz ($(cat "$G/lib-cuda.txt" 2>/dev/null)); LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ldd "$R/site/llama_cpp/lib/libggml-cuda.so" | grep -i "not found" && note "llama.cpp: libraries missing (above)"
elif [ ! -d "$G/llama.cpp" ]; then
  note "build/device-graph holds llama.cpp's CUDA libraries only (graph_prebuild.sh --cuda-libs): rerun graph_prebuild.sh without --cuda-libs for GGML_CUDA=$CUDA"
  exit 2
else
  . benchmarks/device/_llama_flags.sh
  timeout "$(lim 420)" bash -c "cmake -S '$G/llama.cpp' -B '$R/build-cuda-$CUDA' $GEN $(llama_flags "$CUDA") \
    && cmake --build '$R/build-cuda-$CUDA' -j $JOBS --target llama" >"$OUT/build.log" 2>&1
  rc=$?
  note "llama.cpp build: rc=$rc ($(tail -1 "$OUT/build.log"))"
  [ $rc -eq 0 ] || exit 1
  find "$R/build-cuda-$CUDA" -name 'lib*.so*' -exec cp -P {} "$R/site/llama_cpp/lib/" \;
fi
cp "$G/include/"*.h "$R/site/include/"

step "libpyspec (CPU only)"
timeout "$(lim 120)" bash -c "cmake -S . -B '$R/pyspec' $GEN -DPYSPEC_CUDA=OFF -DPYSPEC_NATIVE=OFF \
  && cmake --build '$R/pyspec' -j $JOBS" >"$OUT/pyspec_build.log" 2>&1
note "libpyspec build: rc=$? "
export PYSPEC_LIBRARY="$R/pyspec/libpyspec.so" PYSPEC_CACHE="$R/cache"

step "graph checks on the tiny model, every layer on the device"
timeout "$(lim 300)" $PY benchmarks/device/graph_checks.py "$G/tiny.gguf" "$OUT/graph.json" --gpu-layers -1 \
  2>&1 | grep -v "^llama_kv\|^load_tensors\|^llama_context\|^llama_model_loader" | tee "$OUT/graph.txt"
note "graph checks: rc=${PIPESTATUS[0]} ($(tail -1 "$OUT/graph.txt"))"

step "summary"
cat "$SUMMARY"
