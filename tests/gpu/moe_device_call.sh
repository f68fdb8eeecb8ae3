set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site HALO_CACHE_DIR=/tmp/halo-cache PYTHONUNBUFFERED=1
mkdir -p /tmp/sa
( python3 .device-carry/shape_alike.py build .device-carry/qwen3moe-30b-a3b-shaped-q4_k_m.npz /tmp/sa/qwen3moe-30b-a3b-shaped-q4_k_m.gguf --stable > $OUT/build.log 2>&1; echo built >> $OUT/build.log ) &
timeout 150 python3 -m pytest tests/gpu/test_gpu_forward.py -k "qwen3moe" -q -p no:cacheprovider 2>&1 | tail -25 | tee $OUT/tests.log
wait
tail -3 $OUT/build.log
timeout 150 python3 -c "
from engine.gpu.bench import run_bench, format_result
r = run_bench('/tmp/sa/qwen3moe-30b-a3b-shaped-q4_k_m.gguf', 'cuda-python', repeat=2)
print(format_result(r))
" 2>&1 | tail -15 | tee $OUT/bench.log
