#!/usr/bin/env bash
# The ONE script that runs every GPU test and GPU benchmark on the device machine.
#   bash tests/gpu/run.sh                  (results under $OUT, or ./gpu-out when $OUT is unset)
#   bash tests/gpu/run.sh -k qwen35        (extra arguments go to pytest, to spend a device call on a part)
#   HALO_BENCHES='tests/gpu/bench_long_*.py' bash tests/gpu/run.sh -k nothing   (which benchmarks run)
# Installs carried wheels (.whl/*.whl) if any, runs the GPU + backend tests with junit/log output, the
# probe report, then every tests/gpu/bench_*.py (add a benchmark by adding a file), and prints a summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 HALO_CACHE_DIR="${HALO_CACHE_DIR:-/tmp/halo-cache}" HALO_DATA_DIR="${HALO_DATA_DIR:-/tmp/halo-data}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

{ echo "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$PY" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
  "$PY" -c 'import cuda.bindings as c; print("cuda.bindings", c.__version__)' 2>&1 || true; } | tee "$OUT/summary.txt"

echo "== probe" | tee -a "$OUT/summary.txt"
"$PY" -m engine.backends 2>&1 | tee "$OUT/probe.txt" | tee -a "$OUT/summary.txt"
"$PY" -m engine.backends --json --no-self-test > "$OUT/probe.json" 2>&1

echo "== diagnose --self-test (the report a user would paste into a bug report)" | tee -a "$OUT/summary.txt"
"$PY" -m engine diagnose --self-test --model tests/golden/data/tiny-llama-q4_1.gguf > "$OUT/diagnose.md" 2>&1
echo "diagnose exit code $?; report in diagnose.md" | tee -a "$OUT/summary.txt"

echo "== tests" | tee -a "$OUT/summary.txt"
"$PY" -m pytest tests/gpu tests/backend -m "gpu or not gpu" -p no:cacheprovider -rA -v -s \
  --junitxml="$OUT/junit.xml" "$@" > "$OUT/pytest.log" 2>&1
test_rc=$?
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|exit -?[0-9]+|self-test:|passed|failed" "$OUT/pytest.log" | tail -60 | tee -a "$OUT/summary.txt"

echo "== benchmarks" | tee -a "$OUT/summary.txt"
for bench in ${HALO_BENCHES:-tests/gpu/bench_*.py}; do
  [ -e "$bench" ] || continue
  echo "-- $bench" | tee -a "$OUT/summary.txt"
  timeout 300 "$PY" "$bench" 2>&1 | tee -a "$OUT/bench.log" | tee -a "$OUT/summary.txt"
done

echo "== pytest exit code: $test_rc" | tee -a "$OUT/summary.txt"
exit $test_rc
