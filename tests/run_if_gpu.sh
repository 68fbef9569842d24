#!/bin/sh
# usage: run_if_gpu.sh KJIT_CLI PROGRAM [ARGS]: exit 77 (skip) without a CUDA driver/GPU.
cli=$1; shift
"$cli" info --json | grep -q '"gpus":\[{' || { echo "no GPU: skipped"; exit 77; }
exec "$@"
