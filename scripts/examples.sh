#!/usr/bin/env bash
# examples.sh TARGET: the example directives for TARGET on stdout (GEMM, attention, decode, fp8 decode), the fp8
# caches in the target's e4m3 format (FNUZ on gfx942, OCP elsewhere).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cat "$root/examples/gemm.mlir" "$root/examples/attention.mlir" "$root/examples/decode.mlir"
if [ "$1" = gfx942 ]; then
  sed 's/kv_dtype = f8E4M3FN,/kv_dtype = f8E4M3FNUZ,/' "$root/examples/decode_fp8.mlir"
else
  cat "$root/examples/decode_fp8.mlir"
fi
