#!/usr/bin/env bash
# Builds, on a machine with nvcc but no GPU, what run_device_checks.sh needs, into
# build/device-prebuilt: libpyspec.so (CUDA for sm_90 + PTX, portable CPU code: no
# -march=native, so it runs on the device machine's CPU) and the device_check program. Carry
# that folder to the device machine when it has no nvcc:
#   run(command="bash benchmarks/device/run_device_checks.sh", carry=["build/device-prebuilt"])
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/device-prebuilt
cmake -S . -B "$B" -G Ninja -DPYSPEC_CUDA=ON -DPYSPEC_NATIVE=OFF -DPYSPEC_BUILD_TESTS=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" >/dev/null
cmake --build "$B" -j2
nvcc -std=c++17 -O2 -Icsrc benchmarks/device/device_check.cu -L"$B" -lpyspec -cudart static \
     -Xlinker -rpath='$ORIGIN' -o "$B/device_check"
ls -la "$B/libpyspec.so" "$B/device_check"
