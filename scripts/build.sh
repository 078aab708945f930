#!/usr/bin/env bash
# Configures and builds Tessera (compiler, runtime, simulator, tests) into ${BUILD_DIR:-build}.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export CCACHE_BASEDIR=$ROOT
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir -DLLD_DIR=/usr/lib/llvm-22/lib/cmake/lld
fi
ninja -C "$BUILD_DIR"
