#!/usr/bin/env bash
# The one test command: set up, build, then run every test (GoogleTest and lit through ctest,
# then the Python tests; GPU tests skip with their reason when no GPU is present).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
TESSERA_REQUIRE_PTXAS=1 ctest --test-dir "$BUILD_DIR" --output-on-failure -j2
TESSERA_BUILD_DIR=$BUILD_DIR /usr/bin/python3 -m pytest "$ROOT/python/tests" -q -rs
