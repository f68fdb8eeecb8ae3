#!/usr/bin/env bash
# One device call for gpt-oss on the GPU (carry: a stage with .whl and .device-carry/gpt-oss-20b-shaped-mxfp4.npz,
# written by `python tests/tools/make_gptoss_shape_alike.py skeleton`): builds the 12.1 GB shape-alike in the
# background while every GPU test runs (both CUDA bindings; extra arguments go to pytest), then benchmarks
# it with `python -m engine bench --backend cuda-python` (llama-bench's shapes, then a 512-token prompt).
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT" /tmp/sa
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site HALO_CACHE_DIR=/tmp/halo-cache PYTHONUNBUFFERED=1
GG=/tmp/sa/gpt-oss-20b-shaped-mxfp4.gguf
( python3 tests/tools/make_gptoss_shape_alike.py build .device-carry/gpt-oss-20b-shaped-mxfp4.npz $GG > "$OUT/build.log" 2>&1
  echo "build exit $?" >> "$OUT/build.log" ) &
timeout "${HALO_TEST_TIMEOUT:-240}" python3 -m pytest tests/gpu tests/backend -m "gpu or not gpu" -p no:cacheprovider -q -rfE \
  --deselect tests/backend/test_hip_kernels_compile.py "$@" > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -25
wait
tail -2 "$OUT/build.log"; ls -la /tmp/sa
timeout 150 python3 -m engine bench --backend cuda-python --model $GG 2>&1 | tee "$OUT/bench.log"
timeout 120 python3 -m engine bench --backend cuda-python --model $GG --prompt-tokens 512 --decode-tokens 16 2>&1 \
  | tee "$OUT/bench512.log"
