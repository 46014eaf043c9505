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
#   wheels/         pure-Python packages llama_cpp imports that a device Python may lack
# Then: run(command="bash benchmarks/device/run_graph_checks.sh", carry=["build/device-graph"])
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
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
cp -r "$SRC/llama_cpp" "$G/site/llama_cpp"
rm -rf "$G/site/llama_cpp/lib" "$G/site/llama_cpp/server"
echo "$VERSION" >"$G/VERSION"

echo "the tiny model"
$PY -m pip install -q gguf
$PY pyspec/testing/tiny_gguf.py "$G/tiny.gguf" --vocab 151936  # a plain script: numpy and gguf only

echo "pure-Python packages llama_cpp imports (installed on the device only where missing)"
$PY -m pip download -q --no-deps --only-binary :all: diskcache typing_extensions jinja2 -d "$G/wheels"
du -sh "$G" "$G"/*
