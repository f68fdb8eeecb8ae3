#!/usr/bin/env bash
# What one call of the device machine runs (carry: .whl and .device-carry, both git-ignored):
#   .whl          gguf + platformdirs wheels  (../shared/tools/device-wheels gguf==0.19.0 platformdirs==4.14.9)
#   .device-carry shape_alike.py and the three skeletons from ../shared/reference/skeletons
# Builds the shape-alike GGUFs (real shapes and quant types, random weights) in parallel, then runs every GPU
# test and benchmark through tests/gpu/run.sh, results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export HALO_SHAPE_ALIKE_DIR=/tmp/sa
mkdir -p "$HALO_SHAPE_ALIKE_DIR"
for skel in .device-carry/*.npz; do
  name=$(basename "$skel" .npz)
  [ -f "$HALO_SHAPE_ALIKE_DIR/$name.gguf" ] || python3 .device-carry/shape_alike.py build "$skel" "$HALO_SHAPE_ALIKE_DIR/$name.gguf" &
done
wait
ls -la "$HALO_SHAPE_ALIKE_DIR"
bash tests/gpu/run.sh "$@"
