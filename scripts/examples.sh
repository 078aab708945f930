#!/usr/bin/env bash
# examples.sh TARGET: the example directives for TARGET on stdout (GEMM, attention, decode, fp8 decode, and on the
# targets with fp8 matrix instructions fp8-product decode), the fp8 caches in the target's e4m3 format (FNUZ on
# gfx942, OCP elsewhere).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cat "$root/examples/gemm.mlir" "$root/examples/attention.mlir" "$root/examples/decode.mlir"
fp8=("$root/examples/decode_fp8.mlir")
case "$1" in gfx942 | gfx950 | sm_90 | sm_90a) fp8+=("$root/examples/decode_fp8_products.mlir") ;; esac
if [ "$1" = gfx942 ]; then
  sed 's/kv_dtype = f8E4M3FN,/kv_dtype = f8E4M3FNUZ,/' "${fp8[@]}"
else
  cat "${fp8[@]}"
fi
