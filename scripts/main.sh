#!/usr/bin/env bash
# The main job: set up, build, compile the example directives into a bundle per target (code
# objects, ISA, kernel IR, manifest), then run them: on the GPU when one is present, else on the
# simulator for every target.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
OUT_DIR=${OUT_DIR:-$ROOT/out}
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
mkdir -p "$OUT_DIR/bundles"
TARGETS="gfx942 gfx950 gfx1100 sm_90 sm_90a"
pids=()
for target in $TARGETS; do   # one compiler process per target, in parallel
  "$ROOT/scripts/examples.sh" $target > "$OUT_DIR/examples-$target.mlir"
  "$BUILD_DIR/bin/tessera-compile" "$OUT_DIR/examples-$target.mlir" --target=$target -o "$OUT_DIR/bundles/$target" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
TESSERA_BUILD_DIR=$BUILD_DIR TESSERA_BUNDLE_PATH=$OUT_DIR/bundles \
  /usr/bin/python3 "$ROOT/examples/run_examples.py" $TARGETS
