#!/usr/bin/env bash
# Installs the Debian 12 packages NexusGrad needs to build and test, skipping those present.
set -euo pipefail
packages=(build-essential cmake pkg-config ccache libcmocka-dev libgtest-dev
          python3-torch python3-numpy python3-pytest python3-yaml python3-venv python3-dev swig graphviz valgrind
          dataset-fashion-mnist default-jdk-headless
          zlib1g-dev  # the C examples read .gz files (Fashion-MNIST) through zlib
          python3-matplotlib  # scripts/plot.py draws the examples' CSV files as PNG plots
          abigail-tools  # abidw/abidiff: the ABI check against abi/nexus.abi
          libdlpack-dev  # DLPack's own dlpack.h: tests/capi/test_dlpack*.c compare nexus.h's nx_dl_* layouts with it
          libopenblas0-pthread  # the BLAS peer of bench/cpu_bench.py (NumPy and torch use it)
          clang libclang-rt-14-dev libomp-14-dev)  # CI's sanitizer build: ASan/UBSan, libFuzzer, OpenMP
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
