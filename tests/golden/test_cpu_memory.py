"""The CPU path keeps the starter model's weights quantized: loading it and running a step adds about its
file size to the process, far below its float32 size. Measured in a fresh subprocess (peak RSS)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.gguf import open_gguf
from engine.model.quant_matrix import kernel_path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
from pathlib import Path
from engine.bench import peak_rss_mb
from engine.model.quant_matrix import describe_kernels
from engine.model.loader import load_model
from engine.model.step import KVCache, SequenceBlocks
path = Path(sys.argv[1])


def resident_mb():                    # the RSS now (the peak can be a compile's transient)
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    except OSError:
        return None


describe_kernels()                    # numba and its LLVM are part of the baseline, not of the model
before, resident_before = peak_rss_mb(), resident_mb()
lm = load_model(path)
kv = KVCache.allocate(lm.config, 4, 16)
seq = SequenceBlocks(kv)
token = int(lm.model.forward(seq.step(list(range(1, 41))), kv)[0].argmax())
lm.model.forward(seq.step([token]), kv)
print(json.dumps({"before": before, "after": peak_rss_mb(), "kv": kv.nbytes / 2**20,
                  "weights": lm.weights.nbytes / 2**20, "resident_before": resident_before,
                  "resident_after": resident_mb()}))
"""


@pytest.mark.golden
@pytest.mark.skipif(kernel_path() != "numba", reason="numba is not installed here")
def test_loading_the_starter_adds_about_its_file_size_not_its_float32_size(smollm2_path):
    with open_gguf(smollm2_path) as g:
        as_float32 = sum(t.n_elements * 4 for t in g.tensors.values()) / 2**20
    file_mib = smollm2_path.stat().st_size / 2**20
    run = subprocess.run([sys.executable, "-c", _CHILD, str(smollm2_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout.strip().splitlines()[-1])
    added = r["after"] - r["before"]
    print(f"file {file_mib:.0f} MiB, float32 {as_float32:.0f} MiB, held {r['weights']:.0f} MiB, "
          f"peak RSS {r['before']:.0f} -> {r['after']:.0f} MiB (+{added:.0f})")
    assert r["weights"] < 1.05 * file_mib              # what the loader holds: the file's bytes, not float32
    assert added < 2.0 * file_mib + r["kv"] < 0.4 * as_float32
    if r["resident_before"] is not None:                 # Linux: what stays resident after the load and a step
        resident_added = r["resident_after"] - r["resident_before"]
        print(f"resident {r['resident_before']:.0f} -> {r['resident_after']:.0f} MiB (+{resident_added:.0f})")
        assert file_mib * 0.5 < resident_added < 2.0 * file_mib + r["kv"]
