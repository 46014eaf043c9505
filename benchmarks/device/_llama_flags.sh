# Sourced by graph_prebuild.sh and run_graph_checks.sh: the one set of CMake flags for
# llama.cpp's libllama + libggml on a device machine (CUDA for sm_90 when GGML_CUDA=ON),
# so that libraries prebuilt here and libraries built there are the same build.
llama_flags() {  # $1: ON or OFF (GGML_CUDA)
  echo -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_CUDA="$1" \
    -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF
}
