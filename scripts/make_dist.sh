#!/usr/bin/env bash
# Assembles dist/ for a GPU machine: runtime library, default GEMM bundles per target, Python package, tests, benchmark, GPU check.
# Usage: scripts/make_dist.sh BUILD_DIR DIST_DIR   (BUILD_DIR built: tessera_runtime, tessera-compile;
#        TesseraRuntimeGpuTests and the sim plugin are copied when built). TESSERA_DIST_TARGETS overrides the targets.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR DIST_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
dist=$2
targets=${TESSERA_DIST_TARGETS:-sm_90 gfx942 gfx950 gfx1100}

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
mkdir -p "$dist"/{lib,bin,bundles,python,bench,scripts}
touch "$dist/.tessera-dist"

cp "$runtime" "$dist/lib/"
[ -f "$build/lib/libtessera_sim_plugin.so" ] && cp "$build/lib/libtessera_sim_plugin.so" "$dist/lib/"
gpu_tests=$build/unittests/Runtime/TesseraRuntimeGpuTests
[ -f "$gpu_tests" ] && cp "$gpu_tests" "$dist/bin/"

# One bundle per target. The ISA text (*.s) stays out to keep dist small; the kernel IR stays (the simulator runs it).
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for target in $targets; do
  if ! "$compiler" "$root/examples/gemm.mlir" --target="$target" -o "$stage/$target" >/dev/null 2>"$stage/$target.err"; then
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
  find "$stage/$target" -maxdepth 1 -type f ! -name '*.s' -exec cp {} "$dist/bundles/$target/" \;
done

cp -r "$root/python/tessera" "$root/python/tests" "$dist/python/"
find "$dist/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/bench/bench_gemm.py" "$dist/bench/"
cp "$root/scripts/gpu_check.sh" "$dist/scripts/"

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$root" diff --quiet HEAD -- 2>/dev/null || commit="$commit+dirty"
printf 'commit %s\ndate %s\ntargets %s\n' "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$(ls "$dist/bundles" | tr '\n' ' ')" > "$dist/BUILD_INFO"
echo "wrote $dist ($(du -sh "$dist" | cut -f1)): bundles for $(ls "$dist/bundles" | tr '\n' ' ')"
