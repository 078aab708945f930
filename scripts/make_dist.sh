#!/usr/bin/env bash
# Assembles dist/ for a GPU machine: runtime library, the default GEMM, attention and decode bundles per target (and the
# directives they come from), Python package, tests and the scripts they use, benchmarks, GPU check; and a wheel of the
# package carrying the runtime library and the bundles (wheels/, installable offline; TESSERA_DIST_WHEEL=0 skips it).
# Usage: scripts/make_dist.sh BUILD_DIR DIST_DIR   (BUILD_DIR built: tessera_runtime, tessera-compile;
#        TesseraRuntimeGpuTests is copied when built). TESSERA_DIST_TARGETS overrides the targets;
#        TESSERA_DIST_KERNEL_IR=1 also keeps the kernel IR and the sim plugin (the simulator's inputs; ~10x larger).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR DIST_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
dist=$2
targets=${TESSERA_DIST_TARGETS:-sm_90a sm_90 gfx942 gfx950 gfx1100}
kernel_ir=${TESSERA_DIST_KERNEL_IR:-0}

runtime=$build/lib/libtessera_runtime.so
compiler=$build/bin/tessera-compile
for f in "$runtime" "$compiler"; do
  [ -f "$f" ] || { echo "error: $f not found (build it: ninja -C $build tessera_runtime tessera-compile)" >&2; exit 1; }
done

# Only ever delete a folder this script made.
if [ -e "$dist" ] && [ -n "$(ls -A "$dist")" ] && [ ! -f "$dist/.tessera-dist" ]; then
  echo "error: $dist exists and was not made by $0; refusing to overwrite it" >&2
  exit 1
fi
rm -rf "$dist"
mkdir -p "$dist"/{lib,bin,bundles,python,bench,scripts,examples}
touch "$dist/.tessera-dist"

cp "$runtime" "$dist/lib/"
if [ "$kernel_ir" = 1 ] && [ -f "$build/lib/libtessera_sim_plugin.so" ]; then
  cp "$build/lib/libtessera_sim_plugin.so" "$dist/lib/"
fi
gpu_tests=$build/unittests/Runtime/TesseraRuntimeGpuTests
[ -f "$gpu_tests" ] && cp "$gpu_tests" "$dist/bin/"

# One bundle per target from the example directives together (scripts/examples.sh; tessera-compile writes one
# bundle per input file), the targets compiled in parallel. The ISA text (*.s) stays out; the kernel IR
# (*.kernel.mlir, what the simulator runs, most of a bundle's size) only with TESSERA_DIST_KERNEL_IR=1.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

compile() {   # compile SOURCE TARGET OUT: tessera-compile, its errors in OUT.err
  "$compiler" "$1" --target="$2" -o "$3" >/dev/null 2>"$3.err"
}
# only_error PATTERN FILE: every error line of FILE matches PATTERN (and there is one).
only_error() {
  grep -q ": error: " "$2" && ! grep ": error: " "$2" | grep -qv "$1"
}

pids=()
for target in $targets; do
  "$root/scripts/examples.sh" "$target" > "$stage/default-$target.mlir"
  compile "$stage/default-$target.mlir" "$target" "$stage/$target" &
  pids+=($!)
done
i=0
for target in $targets; do
  status=0
  wait "${pids[$i]}" || status=$?
  i=$((i + 1))
  if [ $status -ne 0 ] && only_error "has no kernel generator" "$stage/$target.err"; then
    echo "warning: $target: no attention kernels ($(grep -m1 ": error: " "$stage/$target.err" | sed 's/.*error: //')); GEMM only" >&2
    status=0
    compile "$root/examples/gemm.mlir" "$target" "$stage/$target" || status=$?
  fi
  if [ $status -ne 0 ]; then
    if [[ $target == sm_* ]] && grep -q "NVIDIA" "$stage/$target.err" &&
       grep -Eqi "not part of this version|unsupported|not supported" "$stage/$target.err"; then
      echo "warning: skipping $target: $(head -n1 "$stage/$target.err")" >&2
      continue
    fi
    cat "$stage/$target.err" >&2
    echo "error: tessera-compile --target=$target failed" >&2
    exit 1
  fi
  mkdir "$dist/bundles/$target"
  if [ "$kernel_ir" = 1 ]; then
    find "$stage/$target" -maxdepth 1 -type f ! -name '*.s' -exec cp {} "$dist/bundles/$target/" \;
  else
    find "$stage/$target" -maxdepth 1 -type f ! -name '*.s' ! -name '*.kernel.mlir' -exec cp {} "$dist/bundles/$target/" \;
  fi
done

# The test-only kernel set of python/tests/test_kernel_set_gpu.py, per plain target (PTX runs on later chips).
for target in $targets; do
  [[ $target == *a ]] && continue
  if ! compile "$root/test/Inputs/colsum-kernel-set.mlir" "$target" "$stage/colsum-$target"; then
    cat "$stage/colsum-$target.err" >&2
    echo "error: tessera-compile --target=$target failed on the test kernel set" >&2
    exit 1
  fi
  mkdir -p "$dist/test-bundles/colsum/$target"
  find "$stage/colsum-$target" -maxdepth 1 -type f ! -name '*.s' -exec cp {} "$dist/test-bundles/colsum/$target/" \;
done

# The attention kernels the GPU tests use beyond the default bundles, per target, compiled in parallel.
pids=()
for target in $targets; do
  [ -d "$dist/bundles/$target" ] || continue
  compile "$root/test/Inputs/attention-gpu-tests.mlir" "$target" "$stage/attention-tests-$target" &
  pids+=($!)
done
i=0
for target in $targets; do
  [ -d "$dist/bundles/$target" ] || continue
  if ! wait "${pids[$i]}"; then
    cat "$stage/attention-tests-$target.err" >&2
    echo "error: tessera-compile --target=$target failed on the GPU tests' attention kernels" >&2
    exit 1
  fi
  i=$((i + 1))
  mkdir -p "$dist/test-bundles/attention/$target"
  find "$stage/attention-tests-$target" -maxdepth 1 -type f ! -name '*.s' ! -name '*.kernel.mlir' \
    -exec cp {} "$dist/test-bundles/attention/$target/" \;
done

cp -r "$root/python/tessera" "$root/python/tests" "$dist/python/"
find "$dist/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/bench/_common.py" "$root/bench/plot.py" "$root/bench/bench_gemm.py" "$root/bench/bench_attn.py" "$root/bench/bench_decode.py" \
  "$dist/bench/"
cp "$root/scripts/gpu_check.sh" "$root/scripts/amd_report.py" "$dist/scripts/"
# The directives of the default bundles: what the tests check the bundles against.
cp "$root/examples/gemm.mlir" "$root/examples/attention.mlir" "$root/examples/decode.mlir" \
  "$root/examples/decode_fp8.mlir" "$root/examples/decode_fp8_products.mlir" "$dist/examples/"

# The wheel: the package with the runtime and the bundles inside it (tessera/_dist/, found before anything but
# TESSERA_HOME and TESSERA_BUILD_DIR), tagged for this platform since it carries a native library.
if [ "${TESSERA_DIST_WHEEL:-1}" = 1 ]; then
  wheel_src=$stage/wheel-src
  mkdir -p "$wheel_src"
  cp "$root/python/pyproject.toml" "$root/python/README.md" "$wheel_src/"
  cp -r "$dist/python/tessera" "$wheel_src/"
  mkdir -p "$wheel_src/tessera/_dist/lib"
  cp "$dist/lib/"*.so "$wheel_src/tessera/_dist/lib/"
  cp -r "$dist/bundles" "$wheel_src/tessera/_dist/"
  platform=$(/usr/bin/python3 -c "import sysconfig; print(sysconfig.get_platform().replace('-', '_'))")
  if ! (cd "$wheel_src" && /usr/bin/python3 -c "from setuptools import setup; setup()" -q bdist_wheel \
        --plat-name "$platform" -d "$dist/wheels" >"$stage/wheel.log" 2>&1); then
    cat "$stage/wheel.log" >&2
    echo "error: building the wheel failed (setuptools and wheel: python3-pip brings both)" >&2
    exit 1
  fi
fi

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$root" diff --quiet HEAD -- 2>/dev/null || commit="$commit+dirty"
printf 'commit %s\ndate %s\ntargets %s\n' "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$(ls "$dist/bundles" | tr '\n' ' ')" > "$dist/BUILD_INFO"
echo "wrote $dist ($(du -sh "$dist" | cut -f1)): bundles for $(ls "$dist/bundles" | tr '\n' ' ')"
