#!/usr/bin/env bash
# Installs what Tessera needs on a fresh Debian 12 machine (root or sudo): LLVM/MLIR/LLD 22,
# the build tools, GoogleTest and the Python test dependencies. Safe to run again.
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
PACKAGES=(
  llvm-22-dev libmlir-22-dev mlir-22-tools lld-22 liblld-22-dev llvm-22-tools
  cmake ninja-build ccache g++ libgtest-dev nlohmann-json3-dev
  python3 python3-numpy python3-pytest python3-pip python3-matplotlib
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# bf16 numpy arrays (the simulator's bf16 tests) need ml_dtypes, which Debian does not package;
# 0.3.2 is the newest that works with Debian 12's numpy 1.24.
if ! /usr/bin/python3 -c "import ml_dtypes" 2>/dev/null; then
  echo "setup: installing ml_dtypes from PyPI"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps "ml_dtypes==0.3.2"
fi
# ptxas for the sm_90a ptxas gate (a lit test): NVIDIA's nvidia-cuda-nvcc wheel when no CUDA toolkit
# is installed (Debian does not package one for this).
if ! /usr/bin/python3 "$(dirname "$0")/ptxas_gate.py" --find >/dev/null; then
  echo "setup: installing ptxas (nvidia-cuda-nvcc-cu12) from PyPI"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps "nvidia-cuda-nvcc-cu12==12.9.86"
fi
