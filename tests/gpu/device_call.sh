#!/usr/bin/env bash
# What one call of the device machine runs (carry: .whl and .device-carry, both git-ignored):
#   .whl          gguf + platformdirs wheels  (../shared/tools/device-wheels gguf==0.19.0 platformdirs==4.14.9)
#   .device-carry shape_alike.py and the three skeletons from ../shared/reference/skeletons
#   .model-chunks (optional) pieces of a real model, `split -b 50M FILE .model-chunks/FILE.part-` plus
#                 FILE.sha256; a piece too many for this call's 64 MiB is staged by an earlier call while the
#                 machine is warm: `bash tests/gpu/device_call.sh --stage-only` with that piece alone
# Builds the shape-alike GGUFs (real shapes and quant types, random weights) in parallel, assembles any real
# model whose pieces have all arrived (checked against its sha256; the GPU golden tests then use it), then
# runs every GPU test and benchmark through tests/gpu/run.sh (arguments pass through), results under $OUT.
# --stable: random scales that keep activations finite (qwen35 overflows to NaN without them); speed is the same.
set -uo pipefail
cd "$(dirname "$0")/../.."
export HALO_MODELS_DIR=/tmp/halo-models
mkdir -p "$HALO_MODELS_DIR/parts"
[ -d .model-chunks ] && cp .model-chunks/* "$HALO_MODELS_DIR/parts/"
if [ "${1:-}" = "--stage-only" ]; then ls -la "$HALO_MODELS_DIR/parts"; exit 0; fi
for sum in "$HALO_MODELS_DIR"/parts/*.sha256; do
  [ -e "$sum" ] || continue
  name=$(basename "$sum" .sha256)
  cat "$HALO_MODELS_DIR/parts/$name".part-* > "$HALO_MODELS_DIR/$name.tmp"
  if [ "$(sha256sum < "$HALO_MODELS_DIR/$name.tmp" | cut -d' ' -f1)" = "$(cat "$sum")" ]; then
    mv "$HALO_MODELS_DIR/$name.tmp" "$HALO_MODELS_DIR/$name" && echo "real model assembled: $name"
  else
    rm -f "$HALO_MODELS_DIR/$name.tmp"; echo "real model $name: pieces missing or corrupt, not used"
  fi
done
[ -d .device-carry/reference ] && export HALO_REFERENCE_DIR="$PWD/.device-carry/reference"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export HALO_SHAPE_ALIKE_DIR=/tmp/sa
mkdir -p "$HALO_SHAPE_ALIKE_DIR"
for skel in .device-carry/*.npz; do
  name=$(basename "$skel" .npz)
  builder=.device-carry/shape_alike.py                      # no MXFP4 there: gpt-oss has its own (same format)
  case "$name" in gpt-oss-*) builder=tests/tools/make_gptoss_shape_alike.py ;; esac
  [ -f "$HALO_SHAPE_ALIKE_DIR/$name.gguf" ] || python3 "$builder" build "$skel" "$HALO_SHAPE_ALIKE_DIR/$name.gguf" --stable &
done
wait
ls -la "$HALO_SHAPE_ALIKE_DIR"
bash tests/gpu/run.sh "$@"
