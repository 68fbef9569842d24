#!/usr/bin/env bash
# One call on the GPU test machine: build, run the gpu-labelled tests and the
# benchmarks. Output goes to few files under $OUT (a device machine may return
# only a handful): machine.txt, cmake.log, build.log, run.log (every stage,
# with headers) and reports.tar (the conformance JSON); a summary is printed last.
# Usage (from the project root):
#   bash bench/run_device.sh [STAGE...]
# (where the dependencies are unpacked .deb trees rather than installed
# packages, source their env.sh first: `source .debs/env.sh; bash ...`)
# Stages (default: tests bench): tests, bench, python, h3 (examples/h3_block.py
# alone, both eager modes), bits (the norm ops'
# outputs and gradients hashed; KJIT_BITS_REF=DIR compares another tree's
# build bit for bit), fuzz (random shapes
# through the Python API: KJIT_FUZZ_SECONDS, KJIT_FUZZ_SEED), apicheck
# (bench/api_check.py, fixed cases through the public Python API;
# KJIT_APICHECK_SEED), conformance, stepprobe (conformance.py's step with
# each flush and upstream-gradient method: bench/stream_probe.py;
# KJIT_STEPPROBE_OPS; KJIT_STEPPROBE_L2 also with those L2 hint values), tune
# (KJIT_TUNE_HIDDEN, KJIT_TUNE_DTYPE; KJIT_TUNE_ONLY=1 skips the tuned bench_ops;
# KJIT_TUNE_PREWARM=1 compiles the tuning space first),
# sanitize (test_adaln's accuracy cases at KJIT_SANITIZE_HIDDEN, test_gather
# and the Python accuracy test under compute-sanitizer), sweep (bench_ops --sweep: every tuning candidate),
# profile (ncu: each backward kernel's time and DRAM bytes), ncudetail (ncu
# sections of the forward and main backward kernel: KJIT_NCU_KERNELS,
# KJIT_NCU_OP, KJIT_NCU_ROWS), ncusource (ncu's warp-stall samples per SASS
# instruction of those kernels, same variables; bench/ncu_top.py), ipc (test_server_ipc's run round trip:
# polling, KJIT_SPIN_US=0, and under MPS where available), sol (bench/sol_probe:
# the fastest plain kernels for the ops' bytes; KJIT_SOL_ROWS), normp
# (bench/norm_probe: plain norm_modulate forwards beside kjit's), cluster
# (bench/cluster_probe: a sort-free backward split over an 8-CTA cluster;
# bench/cluster_fwd_probe: the forward split over a cluster, and whole rows
# with the tables in shared memory; KJIT_CLUSTER_ROWS, KJIT_CLUSTER_PROBES), timeline
# (bench/timeline.py: per-CTA stamps of norm_modulate's training pair;
# KJIT_TIMELINE_ROWS), ab (a template switch at several values: bits,
# optional gpu tests and bench_ops per value; KJIT_AB_MACRO, KJIT_AB_VALUES,
# KJIT_AB_CTEST, KJIT_AB_ROUNDS, KJIT_AB_BENCH).
# pip (pip install ./bindings/python into a venv, then conformance.py --quick
# through the installed package).
# KJIT_CTEST_REGEX / KJIT_CTEST_EXCLUDE narrow the gpu tests; KJIT_CTEST_JOBS
# (default 1) runs that many at once.
set -u
# Settings refused before anything is built or written (exit 2).
case ${KJIT_CTEST_JOBS:-1} in
*[!0-9]* | 0*)
  echo "run_device.sh: KJIT_CTEST_JOBS must be a positive whole number, got '${KJIT_CTEST_JOBS-}'" >&2
  exit 2 ;;
esac
for p in ${KJIT_CLUSTER_PROBES:-cluster_probe cluster_fwd_probe}; do
  case $p in
  cluster_probe | cluster_fwd_probe) ;;
  *) echo "run_device.sh: KJIT_CLUSTER_PROBES: '$p' is not cluster_probe or cluster_fwd_probe" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/kjit-out}
mkdir -p "$OUT"
B=build-gpu
export KJIT_CACHE_DIR=${KJIT_CACHE_DIR:-/tmp/kjit-cache}
# This script runs on the GPU host: a gpu test that finds no driver or GPU
# fails there instead of counting as skipped (tests/util/gpu_util.c).
export KJIT_REQUIRE_GPU=${KJIT_REQUIRE_GPU:-1}
stages=${*:-tests bench}
{ date -u; nvidia-smi; } >"$OUT/machine.txt" 2>&1
if ! cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1; then
  tail -n 40 "$OUT/cmake.log"
  exit 1
fi
# -k: a target that fails to build does not stop the others' tests. The
# benchmark binaries are removed first: on a warm machine a failed build
# would otherwise leave the last call's, whose numbers would pass for this
# tree's.
[ -d $B/bench ] && find $B/bench -maxdepth 1 -type f -perm -u+x -delete
build_ok=1
cmake --build $B -j"$(nproc)" -- -k >"$OUT/build.log" 2>&1 || { build_ok=0; grep -E "error" "$OUT/build.log" | head -20; }
summary=()
[ "$build_ok" = 1 ] || summary+=("BUILD FAILED (build.log): some targets are missing")
LOG="$OUT/run.log"
section() { printf '\n===== %s =====\n' "$*" >>"$LOG"; }
# A copy of the templates with macro $1's default at $2 (bench/template_variant.sh;
# its refusal printed, status non-zero), and the rest of a line run with it
# and a cache of its own (the cache key hashes the templates anyway).
variant_make() { rm -rf "/tmp/kjit-variant/$1-$2"; bench/template_variant.sh "/tmp/kjit-variant/$1-$2" "$1" "$2" 2>&1; }
variant_env() { local m=$1 v=$2; shift 2; KJIT_TEMPLATE_DIR=/tmp/kjit-variant/$m-$v KJIT_CACHE_DIR=/tmp/kjit-variant-cache/$m-$v "$@"; }
# The Python stages: the binding from this tree over the library just built.
# examples/h3_block.py at 4096 rows (the python and h3 stages); its status.
h3_block() { python3 examples/h3_block.py --rows 4096 2>&1 | tee -a "$LOG" | tail -n 35; return "${PIPESTATUS[0]}"; }
python_env() { export KJIT_LIBRARY=$PWD/$B/libkjit.so PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}; }
section info; $B/kjit info 2>&1 | tee -a "$LOG"
for s in $stages; do
  case $s in
  tests)
    # KJIT_CTEST_JOBS > 1 runs that many at once (their lines keep their
    # "N: " prefixes); test_tune, whose tuning must take under 5 s, is
    # RUN_SERIAL (tests/CMakeLists.txt): ctest runs it alone.
    # Line-buffered: a test cut off by a time limit still shows how far it got.
    # The Python gpu tests (label python) are the python stage's, unless
    # KJIT_CTEST_REGEX names tests.
    not_py=(-LE python)
    [ -z "${KJIT_CTEST_REGEX:-}" ] || not_py=()
    section ctest; stdbuf -oL -eL ctest --test-dir $B -L gpu -V -j"${KJIT_CTEST_JOBS:-1}" ${KJIT_CTEST_REGEX:+-R "$KJIT_CTEST_REGEX"} \
      ${not_py[@]+"${not_py[@]}"} ${KJIT_CTEST_EXCLUDE:+-E "$KJIT_CTEST_EXCLUDE"} >>"$LOG" 2>&1
    summary+=("gpu tests rc=$?")
    # The server suites (no GPU needed) on this many-core host too: libnvrtc
    # and the driver start threads (and hold descriptors) here that a 2-core
    # build machine never sees, and compiles end in milliseconds.
    if [ -z "${KJIT_CTEST_REGEX:-}" ]; then
      section "ctest test_server, test_server_cli"
      ctest --test-dir $B -R '^test_server(_cli)?$' --output-on-failure >>"$LOG" 2>&1
      summary+=("test_server, test_server_cli rc=$?")
    fi
    grep -E "Test +#|tests passed|FAILED|worst|differ|rel err" "$LOG" | tail -60 ;;
  bench)
    for cmd in "$B/bench/bench_jit" "python3 bench/peers_sinusoid.py" "$B/bench/bench_ops" "python3 bench/peers_ops.py"; do
      section "$cmd"; $cmd 2>&1 | tee -a "$LOG"
      # A command that stops mid-table must not pass for a finished one.
      summary+=("bench: $cmd rc=${PIPESTATUS[0]}")
    done ;;
  ab)
    # A/B of a template switch: KJIT_AB_MACRO (a macro a template defines
    # under #ifndef, e.g. KJIT_L2_HINT) at each of KJIT_AB_VALUES (the first
    # is the reference; each a word of letters, digits and _). Each variant
    # is a copy of kernel_templates with the default changed
    # (bench/template_variant.sh, whose refusals end the stage), used through
    # KJIT_TEMPLATE_DIR (the cache key hashes the templates, so variants
    # never share a cubin): bench/bits_hash.py compared bit for bit with the
    # first variant's, the gpu tests KJIT_AB_CTEST names (a ctest regex,
    # optional), then KJIT_AB_ROUNDS (2) rounds of bench_ops $KJIT_AB_BENCH
    # interleaved over the variants.
    python_env
    m=${KJIT_AB_MACRO:-} vals=${KJIT_AB_VALUES:-}
    [ -n "$m" ] && [ -n "$vals" ] || { summary+=("ab: set KJIT_AB_MACRO and KJIT_AB_VALUES"); continue; }
    # The variant of value $1 runs the rest of the line.
    ab_env() { variant_env "$m" "$@"; }
    ref="" ab_ok=1
    for v in $vals; do
      err=$(variant_make "$m" "$v") || { summary+=("ab: $err"); ab_ok=0; break; }
      section "ab bits, $m=$v"
      bits=$OUT/bits_$m-$v.txt
      rm -f "$bits"
      ab_env "$v" python3 bench/bits_hash.py --out "$bits" >>"$LOG" 2>&1
      rc=$?
      summary+=("ab bits $m=$v rc=$rc")
      if [ "$rc" != 0 ]; then :
      elif [ -z "$ref" ]; then ref=$v
      elif cmp -s "$OUT/bits_$m-$ref.txt" "$bits"; then summary+=("ab bits $m=$v: equal to $m=$ref")
      else summary+=("ab bits $m=$v: DIFFER from $m=$ref"); fi
      if [ -n "${KJIT_AB_CTEST:-}" ]; then
        section "ab ctest, $m=$v"
        ab_env "$v" ctest --test-dir $B -L gpu -R "$KJIT_AB_CTEST" --output-on-failure >>"$LOG" 2>&1
        summary+=("ab ctest $m=$v rc=$?")
      fi
    done
    [ "$ab_ok" = 1 ] || continue
    for r in $(seq "${KJIT_AB_ROUNDS:-2}"); do
      for v in $vals; do
        section "ab bench_ops, $m=$v, round $r"
        echo "== $m=$v round $r" | tee -a "$LOG"
        ab_env "$v" $B/bench/bench_ops ${KJIT_AB_BENCH:---ops norm_modulate --rows 4097,32768} 2>&1 | tee -a "$LOG" |
          grep -E "^(graph )?(norm_modulate|gated_residual|adaln_row_gather|copy)"
        rc=${PIPESTATUS[0]}
        [ "$rc" = 0 ] || summary+=("ab bench_ops $m=$v round $r rc=$rc")
      done
    done ;;
  python)
    python_env
    # The binding's CPU tests with torch present (the CI machines have none,
    # so their torch parts skip there).
    section test_core; python3 tests/python/test_core.py >>"$LOG" 2>&1
    summary+=("python core tests, with torch rc=$?")
    section test_torch_gpu; python3 tests/python/test_torch_gpu.py >>"$LOG" 2>&1
    summary+=("python gpu tests rc=$?")
    section "test_torch_gpu, KJIT_EAGER=custom_op"; KJIT_EAGER=custom_op python3 tests/python/test_torch_gpu.py >>"$LOG" 2>&1
    summary+=("python gpu tests (KJIT_EAGER=custom_op) rc=$?")
    section test_client_gpu; KJIT_BIN=$PWD/$B/kjit python3 tests/python/test_client_gpu.py 2>&1 | tee -a "$LOG" | tail -n 8
    summary+=("python client run test rc=${PIPESTATUS[0]}")
    section h3_block; h3_block
    summary+=("h3_block rc=$?")
    section profile_binding; python3 bench/profile_binding.py 2>&1 | tee -a "$LOG" | tail -n 30 ;;
  h3)
    # examples/h3_block.py alone, in both eager modes of the binding.
    python_env
    for mode in function custom_op; do
      section "h3_block, KJIT_EAGER=$mode"
      KJIT_EAGER=$mode h3_block
      summary+=("h3_block KJIT_EAGER=$mode rc=$?")
    done ;;
  bits)
    # Every output and gradient of the norm ops on seeded inputs, hashed
    # (bench/bits_hash.py); with KJIT_BITS_REF=DIR (another kjit tree inside
    # the working tree, e.g. `git archive REV | tar -x -C DIR`), that tree's
    # library is built and hashed too, through this tree's binding, and the
    # two compared bit for bit.
    python_env
    section bits; python3 bench/bits_hash.py --out "$OUT/bits.txt" >>"$LOG" 2>&1
    summary+=("bits rc=$?")
    if [ -n "${KJIT_BITS_REF:-}" ]; then
      ref=$(cd "$KJIT_BITS_REF" && pwd)
      section "bits, $ref"
      cmake -S "$ref" -B "$ref/build-ref" -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1 &&
        cmake --build "$ref/build-ref" -j"$(nproc)" --target kjit >>"$LOG" 2>&1 &&
        KJIT_LIBRARY=$ref/build-ref/libkjit.so python3 bench/bits_hash.py --out "$OUT/bits_ref.txt" >>"$LOG" 2>&1
      summary+=("bits of $KJIT_BITS_REF rc=$?")
      if cmp -s "$OUT/bits.txt" "$OUT/bits_ref.txt"; then
        summary+=("bits: equal to $KJIT_BITS_REF's ($(wc -l <"$OUT/bits.txt") cases)")
      else
        summary+=("bits: DIFFER from $KJIT_BITS_REF's")
        diff "$OUT/bits_ref.txt" "$OUT/bits.txt" | head -20
      fi
    fi ;;
  fuzz)
    # Random shapes, dtypes, strides, index patterns and table layouts through
    # the public Python API: accuracy, batch invariance, repeatability.
    python_env
    section fuzz_torch_gpu; python3 tests/python/fuzz_torch_gpu.py --seconds ${KJIT_FUZZ_SECONDS:-150} \
      ${KJIT_FUZZ_SEED:+--seed $KJIT_FUZZ_SEED} 2>&1 | tee -a "$LOG" | tail -n 30
    summary+=("fuzz_torch_gpu rc=${PIPESTATUS[0]}")
    section "fuzz_torch_gpu --inject (every draw must fail)"
    python3 tests/python/fuzz_torch_gpu.py --inject --seconds 20 2>&1 | tee -a "$LOG" | tail -n 1
    summary+=("fuzz_torch_gpu --inject rc=${PIPESTATUS[0]}") ;;
  apicheck)
    # The ops through the public Python API alone, on shapes, layouts and
    # index patterns of its own (bench/api_check.py).
    python_env
    section api_check; python3 bench/api_check.py ${KJIT_APICHECK_SEED:+--seed $KJIT_APICHECK_SEED} >>"$LOG" 2>&1
    summary+=("api_check rc=$?")
    grep -E "FAIL|^api_check" "$LOG" | tail -n 20 ;;
  sol)
    # The fastest plain kernels for the ops' bytes (bench/sol_probe.c).
    section sol_probe; $B/bench/sol_probe ${KJIT_SOL_ROWS:-} >>"$LOG" 2>&1
    summary+=("sol_probe rc=$?")
    grep -E "^BEST" "$LOG" | tail -n 8 ;;
  cluster)
    # A sort-free, cluster-split norm_modulate backward (bench/cluster_probe.c)
    # and the cluster forwards (bench/cluster_fwd_probe.c) beside kjit's and
    # the copy reference, in the same run. KJIT_CLUSTER_PROBES picks the
    # probes (default both: "cluster_probe cluster_fwd_probe").
    for p in ${KJIT_CLUSTER_PROBES:-cluster_probe cluster_fwd_probe}; do # (checked at the top)
      section "$p"; $B/bench/$p ${KJIT_CLUSTER_ROWS:-} 2>&1 | tee -a "$LOG"
      summary+=("$p rc=${PIPESTATUS[0]}")
    done
    section "bench_ops norm_modulate"; $B/bench/bench_ops --ops norm_modulate 2>&1 | tee -a "$LOG" | grep -E "^(graph )?(norm_modulate|copy)" ;;
  timeline)
    # Stamps per CTA of norm_modulate's training pair (bench/timeline.py):
    # starts, ends, the first row's wait, time per row, the flushes.
    python_env
    section timeline; python3 bench/timeline.py --rows ${KJIT_TIMELINE_ROWS:-4097 32768} 2>&1 | tee -a "$LOG"
    summary+=("timeline rc=${PIPESTATUS[0]}") ;;
  normp)
    # A plain norm_modulate forward (bench/norm_probe.c) beside kjit's in the same run.
    section norm_probe; $B/bench/norm_probe ${KJIT_SOL_ROWS:-} >>"$LOG" 2>&1
    summary+=("norm_probe rc=$?")
    section "bench_ops norm_modulate"; $B/bench/bench_ops --ops norm_modulate >>"$LOG" 2>&1
    summary+=("bench_ops rc=$?")
    grep -A40 "norm_probe:" "$LOG" | tail -n 40; grep -E "norm_modulate" "$LOG" | tail -n 6 ;;
  stepprobe)
    # conformance.py's training step timed with each flush and upstream
    # gradient method (bench/stream_probe.py), norm_modulate unless
    # KJIT_STEPPROBE_OPS names others (space-separated); with
    # KJIT_STEPPROBE_L2="V ..." also with the templates' KJIT_L2_HINT at
    # each V (bench/template_variant.sh, a cache of its own).
    python_env
    section stream_probe; python3 bench/stream_probe.py --flush both --upstream both \
      ${KJIT_STEPPROBE_OPS:-norm_modulate} 2>&1 | tee -a "$LOG"
    summary+=("stream_probe rc=${PIPESTATUS[0]}")
    for v in ${KJIT_STEPPROBE_L2:-}; do
      err=$(variant_make KJIT_L2_HINT "$v") || { summary+=("stepprobe: $err"); break; }
      section "stream_probe, KJIT_L2_HINT=$v"
      variant_env KJIT_L2_HINT "$v" python3 bench/stream_probe.py \
        --flush both --upstream both ${KJIT_STEPPROBE_OPS:-norm_modulate} 2>&1 | tee -a "$LOG"
      summary+=("stream_probe KJIT_L2_HINT=$v rc=${PIPESTATUS[0]}")
    done ;;
  conformance)
    python_env
    # The peers get one input seed (to fit a device call) unless the
    # arguments name their own --peer-seeds.
    cargs=${KJIT_CONFORMANCE_ARGS:-}
    case " $cargs" in *" --peer-seeds"*) ;; *) cargs="--peer-seeds 1 $cargs" ;; esac
    section conformance; python3 bench/conformance.py $cargs 2>&1 | tee -a "$LOG" | grep -v "^ " | tail -n 60
    summary+=("conformance rc=${PIPESTATUS[0]}")
    tar -cf "$OUT/reports.tar" bench/reports 2>/dev/null ;;
  tune)
    # KJIT_TUNE_PREWARM=1: compile the tuning space first (kjit prewarm
    # --space), so the tune's own seconds are timing only.
    if [ -n "${KJIT_TUNE_PREWARM:-}" ]; then
      section "prewarm --space"; $B/kjit prewarm --ops norm_modulate,gated_residual,gated_residual_norm_modulate \
        --hidden ${KJIT_TUNE_HIDDEN:-5376} --dtype ${KJIT_TUNE_DTYPE:-bf16} --space 2>&1 | tee -a "$LOG" | tail -n 2
      summary+=("prewarm --space rc=${PIPESTATUS[0]}")
    fi
    section tune; KJIT_LOG=1 $B/kjit tune --ops norm_modulate,gated_residual,gated_residual_norm_modulate \
      --hidden ${KJIT_TUNE_HIDDEN:-5376} --dtype ${KJIT_TUNE_DTYPE:-bf16} --json 2>&1 | tee -a "$LOG"
    summary+=("tune rc=${PIPESTATUS[0]}")
    [ -n "${KJIT_TUNE_ONLY:-}" ] && continue
    section "tune --show"; $B/kjit tune --show 2>&1 | tee -a "$LOG"
    section "bench_ops, tuned"; $B/bench/bench_ops 2>&1 | tee -a "$LOG" ;;
  sweep)
    # Every tuning candidate of the norm ops, timed by the benchmark itself.
    section "bench_ops --sweep"; $B/bench/bench_ops --ops ${KJIT_SWEEP_OPS:-norm_modulate,gated_residual_norm_modulate} \
      --rows ${KJIT_SWEEP_ROWS:-4097,32768} --sweep 2>&1 | tee -a "$LOG" | grep -v "^#" ;;
  profile)
    # Per-kernel device time of each op's backward (ncu, clocks left alone;
    # KJIT_NCU_CACHE=none keeps the L2 warm between kernels as in a stream).
    for op in ${KJIT_PROFILE_OPS:-norm_modulate gated_residual_norm_modulate}; do
      for n in ${KJIT_PROFILE_ROWS:-4097 32768}; do
        section "ncu $op $n"
        timeout 300 ncu --clock-control none --cache-control ${KJIT_NCU_CACHE:-all} --metrics gpu__time_duration.sum,dram__bytes.sum,launch__registers_per_thread \
          -k regex:'kjit_(part|adaln|colsum)' --launch-skip 300 --launch-count 14 \
          $B/bench/bench_ops --ops $op --rows $n >>"$LOG" 2>&1
        grep -E "^  kjit_|gpu__time|dram__bytes" "$LOG" | tail -n 42 | sed -E 's/\(kjit_[a-z_]+_params\).*//; s/ +/ /g' 
      done
    done ;;
  ipc)
    # The run round trip (test_server_ipc): as built, without graph replay
    # of repeated runs (KJIT_RUN_GRAPH=0), without polling (KJIT_SPIN_US=0), and under MPS when the host has its control daemon
    # (started in a private pipe directory, stopped after).
    ipc_test() {
      section "test_server_ipc $1"; ctest --test-dir $B -R test_server_ipc -V >>"$LOG" 2>&1
      summary+=("test_server_ipc $1 rc=$?")
      echo "== $1"; grep -E "round trip" "$LOG" | tail -n 21 | sed -E 's/^[0-9]+: +//; s/ \(target <= 60\)//'
    }
    # Every ordering mechanism, the client's stream busy before each run.
    section "ipc_order_probe"; $B/bench/ipc_order_probe 40 2>&1 | tee -a "$LOG"
    ipc_test "(polling)"
    KJIT_RUN_GRAPH=0 ipc_test "(KJIT_RUN_GRAPH=0: each run launched directly)"
    KJIT_SPIN_US=0 ipc_test "(KJIT_SPIN_US=0)"
    if command -v nvidia-cuda-mps-control >/dev/null; then
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/kjit-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/kjit-mps/log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
      if nvidia-cuda-mps-control -d; then
        sleep 1
        ipc_test "(MPS)"
        section "ipc_order_probe (MPS)"; $B/bench/ipc_order_probe 40 2>&1 | tee -a "$LOG"
        # The Python client under MPS: order="auto" should pick the event.
        section "test_client_gpu (MPS)"
        KJIT_LIBRARY=$PWD/$B/libkjit.so PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH} \
          KJIT_BIN=$PWD/$B/kjit python3 tests/python/test_client_gpu.py 2>&1 | tee -a "$LOG" | grep -E "order=|ok|FAIL"
        summary+=("python client run test (MPS) rc=${PIPESTATUS[0]}")
        echo quit | nvidia-cuda-mps-control; sleep 2
      else
        echo "MPS control daemon did not start"
      fi
      tail -n 5 $CUDA_MPS_LOG_DIRECTORY/control.log 2>/dev/null
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    else
      echo "no nvidia-cuda-mps-control on this host"
    fi ;;
  ncudetail)
    # Where one kernel's time goes (ncu sections: speed of light, warp
    # stalls, occupancy): norm_modulate's forward and main backward kernel.
    for k in ${KJIT_NCU_KERNELS:-kjit_adaln_fwd kjit_adaln_bwd}; do
      section "ncu detail $k ${KJIT_NCU_OP:-norm_modulate} ${KJIT_NCU_ROWS:-4097}"
      timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
        --section LaunchStats --section MemoryWorkloadAnalysis -k regex:"$k" --launch-skip 30 --launch-count 1 \
        $B/bench/bench_ops --ops ${KJIT_NCU_OP:-norm_modulate} --rows ${KJIT_NCU_ROWS:-4097} 2>&1 \
        | grep -vE "^#|^kjit_|^copy|^fused|^op " | tee -a "$LOG" | grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Occupancy|Registers|Block Size|Grid Size" | head -40
    done ;;
  ncusource)
    # Where one kernel's warps wait, instruction by instruction: ncu's
    # warp-stall sampling (SourceCounters) on the SASS, the kernels built with
    # line info. The reports (.ncu-rep) and source pages (CSV) go to
    # $OUT/ncusource.tar;
    # bench/ncu_top.py prints the instructions holding most samples.
    for k in ${KJIT_NCU_KERNELS:-kjit_adaln_bwd}; do
      for n in ${KJIT_NCU_ROWS:-4097}; do
        rep="$OUT/ncusrc_${k}_${KJIT_NCU_OP:-norm_modulate}_$n"
        section "ncu source $k ${KJIT_NCU_OP:-norm_modulate} $n"
        KJIT_LINEINFO=1 timeout 240 ncu --clock-control none --section SourceCounters --section WarpStateStats \
          -k regex:"$k" --launch-skip 30 --launch-count 1 -f -o "$rep" \
          $B/bench/bench_ops --ops ${KJIT_NCU_OP:-norm_modulate} --rows "$n" >>"$LOG" 2>&1
        ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>>"$LOG" ||
          ncu -i "$rep.ncu-rep" --page source --csv >"$rep.csv" 2>>"$LOG"
        python3 bench/ncu_top.py "$rep.csv" ${KJIT_NCU_TOP:-45} 2>&1 | tee -a "$LOG"
      done
    done
    # One file back instead of two per kernel and row count (a device
    # machine may return only a handful).
    (cd "$OUT" && tar -cf ncusource.tar ncusrc_* && rm -f ncusrc_*) ;;
  sanitize)
    # test_adaln's accuracy cases of each hidden size in KJIT_SANITIZE_HIDDEN
    # (default: the ragged fast path at 1000, the fast path at 5376, the
    # scalar path at 13) and test_gather under compute-sanitizer's memcheck.
    for h in ${KJIT_SANITIZE_HIDDEN:-1000 5376 13}; do
      section "compute-sanitizer test_adaln (KJIT_TEST_HIDDEN=$h)"
      KJIT_LINEINFO=1 KJIT_TEST_HIDDEN=$h timeout 300 compute-sanitizer --tool memcheck --print-limit 8 \
        $B/tests/test_adaln >>"$LOG" 2>&1
      summary+=("compute-sanitizer test_adaln KJIT_TEST_HIDDEN=$h rc=$?")
    done
    section "compute-sanitizer test_gather"
    KJIT_LINEINFO=1 timeout 240 compute-sanitizer --tool memcheck --print-limit 8 $B/tests/test_gather >>"$LOG" 2>&1
    summary+=("compute-sanitizer test_gather rc=$?")
    # The same through the Python binding (where the access was seen).
    python_env
    section "compute-sanitizer test_torch_gpu Accuracy.test_dtypes_and_odd_shapes"
    KJIT_LINEINFO=1 CUDA_LAUNCH_BLOCKING=1 timeout 240 compute-sanitizer --tool memcheck --print-limit 8 \
      python3 tests/python/test_torch_gpu.py Accuracy.test_dtypes_and_odd_shapes >>"$LOG" 2>&1
    summary+=("compute-sanitizer test_torch_gpu rc=$?")
    grep -E "Invalid|ERROR SUMMARY|at 0x|by thread|kjit_adaln|kjit_part|kjit_gather|\.cuh:|Saved host backtrace" "$LOG" | head -40 ;;
  pip)
    # The package installed as bindings/python/README.md says (pip, offline)
    # into a virtual environment that sees this host's torch (python3 may
    # itself be a venv's, whose packages --system-site-packages does not
    # reach: a .pth names its site directories), then
    # conformance.py --quick with nothing on PYTHONPATH: the installed
    # package, not the tree's, runs the ops (its path is in the report's
    # environment and printed here).
    v=/tmp/kjit-pip-venv lib=$PWD/$B/libkjit.so
    rm -rf "$v"
    section "pip install ./bindings/python"
    if python3 -m venv --system-site-packages "$v" >>"$LOG" 2>&1 &&
       python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
         >"$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kjit-host-site.pth" &&
       "$v/bin/pip" install --no-index ./bindings/python >>"$LOG" 2>&1; then
      summary+=("pip install rc=0")
      section "conformance.py --quick, the installed package"
      (cd /tmp && env -u PYTHONPATH KJIT_LIBRARY="$lib" "$v/bin/python" -c \
        'import kjit, sys; print("installed package:", kjit.__file__); sys.exit(0 if kjit.__file__.startswith(sys.prefix) else 1)') 2>&1 | tee -a "$LOG"
      summary+=("pip: the installed package imported rc=${PIPESTATUS[0]}")
      env -u PYTHONPATH KJIT_LIBRARY="$lib" "$v/bin/python" bench/conformance.py --quick --peer-seeds 1 2>&1 |
        tee -a "$LOG" | grep -E "^(== |kjit |kjit:)|package" | tail -n 20
      summary+=("pip: conformance.py --quick rc=${PIPESTATUS[0]}")
    else
      summary+=("pip install FAILED (run.log)")
    fi ;;
  *) echo "unknown stage $s" ;;
  esac
done
printf '%s\n' "${summary[@]}"
exit 0
