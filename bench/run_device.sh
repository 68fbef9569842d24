#!/usr/bin/env bash
# One call on the GPU test machine: build, run the gpu-labelled tests and the
# benchmarks. Logs go under $OUT; a short summary is printed last.
# Usage (from the project root):
#   source .debs/env.sh; bash bench/run_device.sh [STAGE...]
# Stages (default: tests bench): tests, bench, python, conformance, tune.
# KJIT_CTEST_REGEX / KJIT_CTEST_EXCLUDE narrow the gpu tests.
set -u
OUT=${OUT:-/tmp/kjit-out}
mkdir -p "$OUT"
B=build-gpu
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-/tmp/kjit-cache}
stages=${*:-tests bench}
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
date -u >"$OUT/date.txt"
if ! cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1; then
  tail -n 40 "$OUT/cmake.log"
  exit 1
fi
# -k: a target that fails to build does not stop the others' tests.
cmake --build $B -j"$(nproc)" -- -k >"$OUT/build.log" 2>&1 || grep -E "error" "$OUT/build.log" | head -20
$B/kjit info | tee "$OUT/info.txt"
summary=()
for s in $stages; do
  case $s in
  tests)
    ctest --test-dir $B -L gpu --output-on-failure -j1 ${KJIT_CTEST_REGEX:+-R "$KJIT_CTEST_REGEX"} \
      ${KJIT_CTEST_EXCLUDE:+-E "$KJIT_CTEST_EXCLUDE"} >"$OUT/ctest_gpu.log" 2>&1
    summary+=("gpu tests rc=$?")
    grep -E "Test #|tests passed|FAILED|worst|differ|rel err" "$OUT/ctest_gpu.log" | head -60 ;;
  bench)
    $B/bench/bench_jit >"$OUT/bench_jit.txt" 2>&1
    $B/bench/bench_ops >"$OUT/bench_ops.txt" 2>&1
    python3 bench/peers_sinusoid.py >"$OUT/peers_sinusoid.txt" 2>&1
    python3 bench/peers_ops.py >"$OUT/peers_ops.txt" 2>&1
    cat "$OUT/bench_jit.txt" "$OUT/peers_sinusoid.txt" "$OUT/bench_ops.txt" "$OUT/peers_ops.txt" ;;
  python)
    export KJIT_LIBRARY=$PWD/$B/libkjit.so PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}
    python3 tests/python/test_torch_gpu.py >"$OUT/test_torch_gpu.txt" 2>&1
    summary+=("python gpu tests rc=$?")
    tail -n 25 "$OUT/test_torch_gpu.txt"
    python3 examples/h3_block.py --rows 4096 >"$OUT/h3_block.txt" 2>&1
    summary+=("h3_block rc=$?")
    tail -n 15 "$OUT/h3_block.txt" ;;
  conformance)
    export KJIT_LIBRARY=$PWD/$B/libkjit.so PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}
    python3 bench/conformance.py ${KJIT_CONFORMANCE_ARGS:-} >"$OUT/conformance.txt" 2>&1
    summary+=("conformance rc=$?")
    mkdir -p "$OUT/reports" && cp bench/reports/*.json "$OUT/reports/" 2>/dev/null
    tail -n 60 "$OUT/conformance.txt" ;;
  tune)
    $B/kjit tune --ops norm_modulate,gated_residual,gated_residual_norm_modulate --hidden 5376 --dtype bf16 --json \
      >"$OUT/tune.json.txt" 2>&1
    summary+=("tune rc=$?")
    $B/kjit tune --show >"$OUT/tune_show.txt" 2>&1
    cat "$OUT/tune.json.txt" "$OUT/tune_show.txt"
    $B/bench/bench_ops >"$OUT/bench_ops_tuned.txt" 2>&1
    cat "$OUT/bench_ops_tuned.txt" ;;
  *) echo "unknown stage $s" ;;
  esac
done
printf '%s\n' "${summary[@]}"
exit 0
