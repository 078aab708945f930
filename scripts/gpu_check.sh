#!/usr/bin/env bash
# GPU check: runtime C++ GPU tests, every pytest test (GPU ones included), then the GEMM and attention benchmarks; logs and JSON to $TESSERA_BENCH_OUT (else ./bench-out).
# Needs no compiler: run it from a checkout holding dist/ (scripts/gpu_check.sh) or from inside a copied dist/ (dist/scripts/gpu_check.sh).
# Environment: TESSERA_HOME (dist folder, default: the one this script is in or <checkout>/dist), PYTHON (default python3),
#              TESSERA_BENCH_ARGS (extra bench_gemm.py arguments, e.g. "--shapes 4096x4096x4096"),
#              TESSERA_BENCH_ATTN_ARGS (extra bench_attn.py arguments, e.g. "--cases 4x4096x32x32x128:bf16:causal"),
#              TESSERA_BENCH_ATTN_BWD_ARGS (extra bench_attn.py --backward arguments),
#              TESSERA_BENCH_DECODE_ARGS (extra bench_decode.py arguments),
#              TESSERA_PYTEST_ARGS (extra pytest arguments, e.g. "-k attention").
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$here/lib/libtessera_runtime.so" ]; then
  dist=$here
else
  dist=${TESSERA_HOME:-$here/dist}
fi
if [ ! -f "$dist/lib/libtessera_runtime.so" ]; then
  echo "error: no $dist/lib/libtessera_runtime.so: build dist/ with scripts/make_dist.sh, copy it here, or set TESSERA_HOME" >&2
  exit 2
fi
export TESSERA_HOME=$dist
out=${TESSERA_BENCH_OUT:-$PWD/bench-out}
mkdir -p "$out"
export TESSERA_BENCH_OUT=$out
python=${PYTHON:-python3}
failed=()

# step NAME COMMAND...: runs, tees the output to $out/NAME.log, records a failure.
step() {
  local name=$1
  shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "=== $name: FAILED (exit $rc)"
    failed+=("$name (exit $rc)")
  fi
}

{
  echo "dist: $dist"
  cat "$dist/BUILD_INFO" 2>/dev/null
  nvidia-smi -L 2>&1 || true
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1
} | tee "$out/environment.log"

gpu_tests=$dist/bin/TesseraRuntimeGpuTests
if [ -x "$gpu_tests" ]; then
  step runtime-gpu-tests env LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$gpu_tests" --gtest_output="xml:$out/runtime-gpu-tests.xml"
else
  echo "=== runtime-gpu-tests: $gpu_tests not in dist (build TesseraRuntimeGpuTests before make_dist.sh)"
fi

# The tests' kernels beyond the default bundles: a later folder of the search path (a variant the default bundle lacks
# is looked up there).
tests_path=$dist/bundles:$dist/test-bundles/attention
# shellcheck disable=SC2086
TESSERA_BUNDLE_PATH=${TESSERA_BUNDLE_PATH:+$TESSERA_BUNDLE_PATH:}$tests_path step pytest "$python" -m pytest "$here/python/tests" -ra -q -p no:cacheprovider --junitxml="$out/pytest.xml" \
  ${TESSERA_PYTEST_ARGS:-}

if [ ${#failed[@]} -eq 0 ]; then
  echo "=== tests passed; benchmark next"
else
  echo "=== FAILED: ${failed[*]}; benchmark next"
fi
# The benchmarks' tables are the last things printed (attention last).
# shellcheck disable=SC2086
step bench-gemm "$python" "$here/bench/bench_gemm.py" ${TESSERA_BENCH_ARGS:-}
# shellcheck disable=SC2086
step bench-decode "$python" "$here/bench/bench_decode.py" ${TESSERA_BENCH_DECODE_ARGS:-}
# shellcheck disable=SC2086
step bench-attn-bwd "$python" "$here/bench/bench_attn.py" --backward ${TESSERA_BENCH_ATTN_BWD_ARGS:-}
# shellcheck disable=SC2086
step bench-attn "$python" "$here/bench/bench_attn.py" ${TESSERA_BENCH_ATTN_ARGS:-}
[ ${#failed[@]} -eq 0 ]
