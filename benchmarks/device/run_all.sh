#!/usr/bin/env bash
# Every device check in one call, packed for the device tool (it returns at most 8 files):
#   run(command="bash benchmarks/device/run_all.sh",
#       carry=[".whl", "build/device-graph", "build/device-before"], timeout_s=540)
# then here: tar xzf <files_at>/device-results.tgz -C /tmp/dev and
#   python3 benchmarks/device/keep_device_results.py /tmp/dev/checks --graph /tmp/dev/graph \
#       [--paired /tmp/dev/paired]
# Steps, each given part of BUDGET (default 480 s; a machine's start comes on top):
#   1. run_device_checks.sh (the CUDA back end: build, identity sweep, bench, test_cuda.py,
#      memcheck) into checks/
#   2. run_graph_checks.sh (the in-graph sampler) into graph/, where build/device-graph was
#      carried (graph_prebuild.sh --cuda-libs makes it)
#   3. `device_check bench` before and after, alternating, PAIRS times (default 2) into
#      paired/ (old<i>.json, new<i>.json, sides.txt saying which is which): before is
#      build/device-before's device_check where that was carried (prebuild.sh of the commit
#      to compare, copied there), else this build with split rows off; after is this build
#      with split rows on (SPLIT_ROWS=1)
# Wheels a device Python lacks (cffi, pycparser for tests/test_cuda.py) travel in .whl
# (docs/cuda.md says how to fetch them).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
FINAL=${OUT:-$ROOT/build/device-out}
BUDGET=${BUDGET:-480}
T0=$SECONDS
W=$(mktemp -d)
mkdir -p "$FINAL" "$W/checks" "$W/graph" "$W/paired"
left() { echo $((BUDGET - (SECONDS - T0))); }

if ls .whl/*.whl >/dev/null 2>&1; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
       --target "$W/site" .whl/*.whl 2>"$W/wheels.txt"; then
    export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "== the carried wheels do not install here ($(tail -1 "$W/wheels.txt")); the installed packages are used"
  fi
fi

echo "== CUDA back end ($(left) s left)"
OUT="$W/checks" BUDGET=$(($(left) * 55 / 100)) bash benchmarks/device/run_device_checks.sh \
  >"$W/checks/run.log" 2>&1
cat "$W/checks/summary.txt"

if [ -f build/device-graph/VERSION ]; then
  echo "== in-graph sampler ($(left) s left)"
  OUT="$W/graph" BUDGET=$(($(left) * 60 / 100)) bash benchmarks/device/run_graph_checks.sh \
    >"$W/graph/run.log" 2>&1
  cat "$W/graph/summary.txt"
else
  echo "== in-graph sampler: skipped (no build/device-graph carried)"
fi

NEW=build/device/device_check
[ -x "$NEW" ] || NEW=build/device-hand/device_check
OLD=build/device-before/device_check
if [ -x "$OLD" ]; then
  echo "before: the row kernel of build/device-before ($(cat build/device-before/COMMIT 2>/dev/null || echo 'commit not recorded'))" >"$W/paired/sides.txt"
else
  OLD=$NEW
  echo "before: this build, split rows off" >"$W/paired/sides.txt"
fi
echo "after: this build, split rows on" >>"$W/paired/sides.txt"
if [ -x "$NEW" ]; then
  echo "== before/after bench ($(left) s left): $(tr '\n' ';' <"$W/paired/sides.txt")"
  for i in $(seq 1 "${PAIRS:-2}"); do
    for side in old new; do
      [ "$(left)" -gt 30 ] || break 2
      prog=$([ $side = old ] && echo "$OLD" || echo "$NEW")
      split=$([ $side = old ] && echo 0 || echo 1)
      SPLIT_ROWS=$split timeout 40 "$prog" bench "$W/paired/$side$i.json" >"$W/paired/$side$i.txt" 2>&1
      echo "$side$i: rc=$?"
    done
  done
fi

cp "$W/checks/summary.txt" "$FINAL/summary.txt" 2>/dev/null
tar czf "$FINAL/device-results.tgz" -C "$W" checks graph paired
echo "== done in $((SECONDS - T0)) s: $FINAL/device-results.tgz"
