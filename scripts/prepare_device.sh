#!/usr/bin/env bash
# Run here (not on the device): gathers what the device machine lacks into the
# git-ignored folder .carry/, which every device run names in `carry`.
# Usage: bash scripts/prepare_device.sh [--base REV]
#   --base REV: also the library's sources at REV in .carry/base/, for the
#   `builds` suite (this tree against REV: SASS, ptxas, timing).
# Now: CLI11's headers and CMake package (the device has no CLI11) and the
# cudnn-frontend headers (the device's cuDNN is PyTorch's, without them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build >/dev/null   # makes sure libcli11-dev is installed here
rm -rf .carry && mkdir -p .carry/include .carry/share/cmake
cp -r /usr/include/CLI .carry/include/
cp -r /usr/share/cmake/CLI11 .carry/share/cmake/
cp -r .deps/cudnn_frontend/include/. .carry/include/   # cudnn-frontend headers (setup.sh fetched them)
git rev-parse --short=12 HEAD > .carry/commit  # the device copy has no .git
if [ "${1:-}" = --base ]; then
  mkdir -p .carry/base
  git archive "$2" CMakeLists.txt cmake include src python pyproject.toml | tar -x -C .carry/base
  git rev-parse --short=12 "$2" > .carry/base/commit
fi
du -sh .carry
