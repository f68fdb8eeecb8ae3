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
from engine.bench import peak_rss_mb, reset_peak_rss, resident_mb
from engine.gguf import open_gguf
from engine.model.quant_matrix import describe_kernels, prepare_kernels
from engine.model.loader import load_model
from engine.model.step import KVCache, SequenceBlocks
path = Path(sys.argv[1])


describe_kernels()                    # numba and its LLVM are part of the baseline, not of the model
with open_gguf(path) as g:            # nor is compiling the model's kernels (when numba's cache is cold)
    prepare_kernels({t.ggml_type for t in g.tensors.values()})
before = resident_before = resident_mb()  # what the bench measures from (the peak so far is a transient)
if not reset_peak_rss() or before is None:  # ... and from where the peak counts again (Linux)
    before = peak_rss_mb()
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
          f"{r['before']:.0f} MiB before the load -> peak RSS {r['after']:.0f} MiB (+{added:.0f})")
    assert r["weights"] < 1.05 * file_mib              # what the loader holds: the file's bytes, not float32
    assert added < 2.0 * file_mib + r["kv"] < 0.4 * as_float32
    if r["resident_before"] is not None:                 # Linux: what stays resident after the load and a step
        resident_added = r["resident_after"] - r["resident_before"]
        print(f"resident {r['resident_before']:.0f} -> {r['resident_after']:.0f} MiB (+{resident_added:.0f})")
        assert file_mib * 0.5 < resident_added < 2.0 * file_mib + r["kv"]


# A child's check that a small Q8_0 product through QuantMatrix is right (`want` vs `out`), in place of the line
# Q8_0_PRODUCT in the child scripts below
_Q8_0_PRODUCT = """
raw = np.zeros((3, 34), np.uint8)
raw[:, 1], raw[:, 2:] = 0x3C, np.arange(32, dtype=np.uint8)
m = QuantMatrix(raw, GGMLType.Q8_0, 3, 32)
x = np.linspace(-1, 1, 32, dtype=np.float32)
out = np.empty(3, np.float32)
m.matvec(x, out)
want = dequantize(raw, GGMLType.Q8_0, 96).reshape(3, 32) @ x
"""

_LLVM_CHILD = """
import json
import numpy as np
from engine.gguf.dequant import dequantize
from engine.gguf.types import GGMLType
from engine.model.quant_matrix import QuantMatrix, describe_kernels, release_compiler_pages


def llvm_pages_mb():   # (resident, of which private clean: the file's own pages) MiB of LLVM's read-only mappings
    rss = private = 0
    in_llvm = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                in_llvm = len(head) > 5 and "llvmlite" in head[5] and "w" not in head[1]
            elif in_llvm and head[0] == "Rss:":
                rss += int(head[1])
            elif in_llvm and head[0] == "Private_Clean:":   # (Private_Dirty: relocated, cannot go back)
                private += int(head[1])
    return rss / 1024, private / 1024


import numba                          # LLVM loaded and initialised: its pages are touched
touched = llvm_pages_mb()[0]
describe_kernels()                    # the kernels' first use: the smoke test, then the pages go back
after_first_use = llvm_pages_mb()[1]
advised = release_compiler_pages()
# a Q8_0 product still runs right without the pages
Q8_0_PRODUCT
print(json.dumps({"touched": touched, "after_first_use": after_first_use, "advised": advised,
                  "product_error": float(np.abs(out - want).max())}))
""".replace("Q8_0_PRODUCT\n", _Q8_0_PRODUCT.lstrip("\n"), 1)


@pytest.mark.skipif(kernel_path() != "numba" or not sys.platform.startswith("linux"),
                    reason="numba's compiler pages are given back on Linux only")
def test_the_compilers_pages_are_given_back_once_the_kernels_are_ready():
    run = subprocess.run([sys.executable, "-c", _LLVM_CHILD], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout.strip().splitlines()[-1])
    print(r)
    if not r["advised"]:
        pytest.skip("this kernel has no MADV_PAGEOUT (Linux < 5.4)")
    assert r["touched"] > 20                     # importing numba makes LLVM resident (~40-70 MiB)
    # ... and the first use gives back every file page this process holds alone (MADV_PAGEOUT leaves pages
    # that another process maps too, e.g. a parent that imported numba: they are not this process's cost)
    assert r["after_first_use"] < 1.0
    assert r["product_error"] < 1e-5


_LEAN_CHILD = """
import json, sys
import numpy as np
from engine.gguf.dequant import dequantize
from engine.gguf.types import GGMLType
from engine.model.quant_matrix import QuantMatrix, describe_kernels, prepare_kernels
describe_kernels()
prepare_kernels({GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K})
Q8_0_PRODUCT
print(json.dumps({"registry": sorted(n for n in ("numba.np.linalg", "numba.experimental.jitclass.base",
                                                 "numba.typed.typeddict") if n in sys.modules),
                  "product_error": float(np.abs(out - want).max())}))
""".replace("Q8_0_PRODUCT\n", _Q8_0_PRODUCT.lstrip("\n"), 1)


@pytest.mark.skipif(kernel_path() != "numba", reason="numba is not installed here")
def test_cached_kernels_are_read_without_numbas_implementation_registry():
    """engine.model.numba_cache: numba's cache read no longer installs every implementation it has (~11 MiB
    resident: linalg, typed containers, jitclass, ...). The first run may compile (a cold cache; a compile
    loads them all, as it must); the second reads every kernel from the cache."""
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", _LEAN_CHILD], cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["registry"] == []
    assert r["product_error"] < 1e-5


_IMPORTS_CHILD = """
import json, sys
from pathlib import Path
import engine.cli, engine.bench
from engine.model.loader import load_model
from engine.prompt import PromptFormat
lm = load_model(Path(sys.argv[1]))
PromptFormat.from_metadata(lm.metadata).encode_raw("Hello")
print(json.dumps(sorted(m for m in ("ssl", "urllib.request", "http.client", "huggingface_hub", "PySide6",
                                   "jinja2", "tokenizers") if m in sys.modules)))
"""


@pytest.mark.golden
@pytest.mark.parametrize("model, imported", [("smollm2_path", ["tokenizers"]), ("gemma_path", [])])
def test_the_cpu_load_does_not_import_the_network_stack(request, model, imported):
    """`python -m engine bench` and the CPU load never download anything: ssl and urllib (~8 MiB resident)
    are imported where a download starts, not by every engine command. Nor does this process render chat
    templates: jinja2 (~7 MiB) is imported by the template worker alone (engine.template_sandbox). The Rust
    `tokenizers` (~4 MiB) come in for a BPE vocabulary only: gemma's SentencePiece runs without them."""
    path = request.getfixturevalue(model)
    run = subprocess.run([sys.executable, "-c", _IMPORTS_CHILD, str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == imported


@pytest.mark.golden
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc")
def test_a_kv_cache_sized_for_a_whole_context_costs_what_is_written(smollm2_path):
    """The Engine sizes the cache for the whole context (8192 tokens: 360 MiB for SmolLM2) and a chat writes
    a few slots: with numpy's huge pages each layer's K and V made 2 MiB resident at its first slot
    (120 MiB after one short request); with small pages, one token in every layer costs kilobytes."""
    from engine.bench import resident_mb
    from engine.model.config import ModelConfig
    from engine.model.step import KVCache

    with open_gguf(smollm2_path) as g:
        config = ModelConfig.from_metadata(g.metadata)
    kv = KVCache.allocate(config, num_blocks=512, block_size=16)
    assert kv.nbytes > 300 * 2**20
    before = resident_mb()
    for k, v in zip(kv.k, kv.v, strict=True):
        k[300, 3] = 1.0                  # one token slot in the middle of every layer's K and V
        v[300, 3] = 1.0
    assert resident_mb() - before < 8, f"{resident_mb() - before:.1f} MiB resident for {len(kv.k)} slots"
