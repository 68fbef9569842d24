#!/bin/sh
# usage: run_if_gpu.sh KJIT_CLI PROGRAM [ARGS]: exit 77 (skip) without a CUDA
# driver/GPU, or 1 when KJIT_REQUIRE_GPU is set (not "0"), as on the GPU host.
cli=$1; shift
if ! "$cli" info --json | grep -q '"gpus":\[{'; then
    case "${KJIT_REQUIRE_GPU:-0}" in
        0) echo "no GPU: skipped"; exit 77 ;;
        *) echo "no GPU, and KJIT_REQUIRE_GPU is set: failed" >&2; exit 1 ;;
    esac
fi
exec "$@"
