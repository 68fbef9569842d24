#!/usr/bin/env bash
# One call on the GPU test machine: build, run every gpu-labelled test and the
# benchmarks. Logs go under $OUT; a short table is printed last.
# Usage (from the project root): source .debs/env.sh; bash bench/run_device.sh [quick]
set -u
OUT=${OUT:-/tmp/kjit-out}
mkdir -p "$OUT"
B=build-gpu
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-/tmp/kjit-cache}
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
date -u >"$OUT/date.txt"
if ! cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1; then
  tail -n 40 "$OUT/cmake.log"
  exit 1
fi
# -k: a target that fails to build does not stop the others' tests.
cmake --build $B -j"$(nproc)" -- -k >"$OUT/build.log" 2>&1 || grep -E "error" "$OUT/build.log" | head -20
$B/kjit info | tee "$OUT/info.txt"
ctest --test-dir $B -L gpu --output-on-failure -j1 >"$OUT/ctest_gpu.log" 2>&1
echo "gpu tests: rc=$?"
grep -E "tests passed|Failed|\*\*\*|worst|FAIL|differ" "$OUT/ctest_gpu.log" | head -40
$B/bench/bench_jit 2>&1 | tee "$OUT/bench_jit.txt"
python3 bench/peers_sinusoid.py 2>&1 | tee "$OUT/peers_sinusoid.txt"
for b in $B/bench/bench_ops; do
  [ -x "$b" ] && "$b" 2>&1 | tee "$OUT/$(basename "$b").txt"
done
for p in bench/peers_ops.py; do
  [ -f "$p" ] && python3 "$p" 2>&1 | tee "$OUT/$(basename "$p" .py).txt"
done
exit 0
