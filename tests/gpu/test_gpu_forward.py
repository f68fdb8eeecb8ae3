"""GPU forward vs the CPU float32 forward on the same files: every architecture and quant type of the tiny
random-weight GGUFs (tests/golden/data), prompt logits at every position, greedy decode through the paged
KV cache (eager and graph-replayed, ids through the ReadbackPool), chunked prefill into scrambled blocks, a
two-sequence batch, on-device sampling against the host sampler's distribution, identical ids with
CUDA_LAUNCH_BLOCKING=1, and the shape-alike real-size models when HALO_SHAPE_ALIKE_DIR names them.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.api import SamplingParams
from engine.backends.async_output import ReadbackPool
from engine.gpu.model import GpuModel
from engine.gpu.stepmeta import SamplingRow
from engine.model.loader import load_model
from engine.model.step import StepInput
from engine.sampling import filtered_probs
from tests.gpu import gpu_tiny_names

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "golden" / "data"
NAMES = gpu_tiny_names(DATA)
ATOL = 1e-3          # float32 vs float32 in another summation order; observed ~1e-5
# the longest golden prompt (tiny qwen35's) is 80 tokens, its logits read at every position
CAPACITY = dict(max_tokens=128, max_seqs=96, kv_blocks=16)


def seq_step(ids, start: int, blocks: list[int], bs: int, logits_at=None) -> StepInput:
    positions = np.arange(start, start + len(ids), dtype=np.int32)
    table = np.asarray(blocks, dtype=np.int32)
    slots = table[positions // bs].astype(np.int64) * bs + positions % bs
    return StepInput(token_ids=np.asarray(ids, np.int32), positions=positions, slot_mapping=slots,
                     query_start_loc=np.array([0, len(ids)], np.int32),
                     seq_lens=np.array([start + len(ids)], np.int32), block_tables=table[None, :],
                     logits_indices=None if logits_at is None else np.asarray(logits_at, np.int32))


_models: dict = {}


def models(name: str, backend):
    key = (name, id(backend))
    if key not in _models:
        _models.clear()
        cpu = load_model(DATA / f"{name}.gguf")
        gpu = GpuModel.load(DATA / f"{name}.gguf", backend, **CAPACITY)
        _models[key] = (cpu, gpu, dict(np.load(DATA / f"{name}.golden.npz")))
    return _models[key]


def greedy_ids(gpu: GpuModel, backend, prompt, n: int, graphs: bool) -> list[int]:
    """Prompt, then n - 1 decode steps fed from the device; ids only through the ReadbackPool."""
    gpu.use_graphs = graphs
    kv = gpu.new_kv_cache(8, 16)
    pool = ReadbackPool(backend, slots=3)
    try:
        first = gpu.step(seq_step(prompt, 0, list(range(8)), 16), kv, pool, feed_next=True)
        out = [int(first.get_output()["ids"][0])]
        pending = []
        for i in range(n - 1):
            pos = len(prompt) + i
            st = seq_step([out[0]], pos, list(range(8)), 16)       # ids come from the device, not from here
            pending.append(gpu.step(st, kv, pool, ids_on_device=True, feed_next=True))
            if len(pending) == 2:
                out.append(int(pending.pop(0).get_output()["ids"][0]))
        out += [int(p.get_output()["ids"][0]) for p in pending]
        return out
    finally:
        pool.close()
        gpu.drop_graphs(kv)
        kv.free()


@pytest.mark.parametrize("name", NAMES)
def test_prompt_logits_match_cpu(name, backend):
    cpu, gpu, g = models(name, backend)
    prompt = g["prompt_ids"]
    T = len(prompt)
    every = np.arange(T, dtype=np.int32)
    nb = -(-T // 16)
    kv_c = cpu.model.new_kv_cache(nb, 16)
    kv_g = gpu.new_kv_cache(nb, 16)
    try:
        want = cpu.model.forward(seq_step(prompt, 0, list(range(nb)), 16, every), kv_c)
        got = gpu.forward(seq_step(prompt, 0, list(range(nb)), 16, every), kv_g)
        diff = float(np.abs(got - want).max())
        print(f"\n{name}: max |gpu - cpu| over {T} x {want.shape[1]} logits = {diff:.2e}")
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
        np.testing.assert_allclose(got[-4:], g["prompt_logits_last"], atol=ATOL, rtol=0)
    finally:
        kv_g.free()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("attention", ["tc", "ts", "untiled"])
def test_every_prefill_attention_matches_cpu(name, attention, backend):
    """The prompt's logits with each prefill attention the forward can choose: the tensor-core tile (CUDA), the SIMT
    tile (HIP's), halo_attention (HALO_GPU_FLASH=0), on both cache types."""
    from engine.gpu.forward import flash_usable, ts_usable
    cpu, gpu, g = models(name, backend)
    fwd = gpu.fwd
    usable = {"tc": fwd.use_tc and flash_usable(gpu.config), "ts": ts_usable(gpu.config), "untiled": True}
    if not usable[attention]:
        pytest.skip(f"{attention} prefill attention does not apply to {name} on {backend.name}")
    prompt = g["prompt_ids"]
    T = len(prompt)
    every = np.arange(T, dtype=np.int32)
    nb = -(-T // 16)
    kv_c = cpu.model.new_kv_cache(nb, 16)
    want = cpu.model.forward(seq_step(prompt, 0, list(range(nb)), 16, every), kv_c)
    own = fwd.flash, fwd.ts, fwd.ts_min_context
    try:
        fwd.flash, fwd.ts, fwd.ts_min_context = attention == "tc", attention == "ts", 0   # the tile at any length
        for kv_type in ("f32", "f16"):
            kv_g = gpu.new_kv_cache(nb, 16, kv_type=kv_type)
            try:
                got = gpu.forward(seq_step(prompt, 0, list(range(nb)), 16, every), kv_g)
            finally:
                kv_g.free()
            # the f16 cache rounds K and V to 11 significant bits (test_f16_kv_cache_stays_near_the_float32_cache)
            atol = ATOL if kv_type == "f32" else 1e-2 * max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, atol=atol, rtol=0, err_msg=f"{attention}, {kv_type} cache")
    finally:
        fwd.flash, fwd.ts, fwd.ts_min_context = own


@pytest.mark.parametrize("name", NAMES)
def test_f16_kv_cache_stays_near_the_float32_cache(name, backend):
    """An f16 cache (kv_type="f16": halo_rope_kv_f16 writes, the _f16 attention builds read) against the
    float32 cache on the same prompt (prefill attention) and one decode step after it (split-KV): K and V are
    rounded to 11 significant bits, so the logits move, but by about that much, not more."""
    cpu, gpu, g = models(name, backend)
    prompt = list(g["prompt_ids"])
    T = len(prompt)
    nb = -(-(T + 1) // 16)
    blocks = list(range(nb))
    logits = {}
    for kv_type in ("f32", "f16"):
        kv = gpu.new_kv_cache(nb, 16, kv_type=kv_type)
        try:
            assert kv.kv_type == kv_type
            first = gpu.forward(seq_step(prompt, 0, blocks, 16, np.arange(T, dtype=np.int32)), kv)
            nxt = gpu.forward(seq_step([int(np.argmax(first[-1]))], T, blocks, 16, [0]), kv)
            logits[kv_type] = np.concatenate([first, nxt])
        finally:
            kv.free()
    ref, half = logits["f32"], logits["f16"]
    diff = float(np.abs(half - ref).max())
    scale = max(1.0, float(np.abs(ref).max()))
    print(f"\n{name}: max |f16 cache - f32 cache| = {diff:.2e} (logits up to {scale:.2f})")
    assert 0 < diff <= 1e-2 * scale


@pytest.mark.parametrize("name", NAMES)
def test_greedy_decode_eager_and_graph_match_golden(name, backend):
    cpu, gpu, g = models(name, backend)
    n = len(g["greedy_ids"])
    eager = greedy_ids(gpu, backend, g["prompt_ids"], n, graphs=False)
    graph = greedy_ids(gpu, backend, g["prompt_ids"], n, graphs=True)
    assert eager == list(g["greedy_ids"]), (eager, g["greedy_ids"])
    assert graph == eager


@pytest.mark.parametrize("name", NAMES)
def test_programmatic_and_plain_launches_give_identical_results(name, backend):
    """Programmatic dependent launch (CUDA sm_90+, captured steps: a kernel opening with GRID_DEPENDENCY_LATER
    may start while the one before it runs and waits for it in-kernel) against plain stream order: the same
    greedy ids through captured graphs, and eager prompt logits (plain launches either way) bit for bit. A
    kernel that touched its inputs before its wait would race and drift here."""
    if not backend.programmatic:
        pytest.skip(f"{backend.name} on {backend.arch} launches plainly (programmatic launch: CUDA sm_90+)")
    cpu, gpu, g = models(name, backend)
    prompt = list(g["prompt_ids"])
    nb = -(-len(prompt) // 16)
    n = len(g["greedy_ids"])
    runs = {}
    every_before = backend.programmatic_everything
    try:
        # plain; the entries' choice; every kernel (pdl_every_kernel: wide models)
        for mode, (programmatic, everything) in {"plain": (False, False), "entries": (True, False),
                                                 "every": (True, True)}.items():
            backend.programmatic, backend.programmatic_everything = programmatic, everything
            kv = gpu.new_kv_cache(nb, 16)
            try:
                logits = gpu.forward(seq_step(prompt, 0, list(range(nb)), 16, np.arange(len(prompt))), kv)
            finally:
                kv.free()
            runs[mode] = (logits, greedy_ids(gpu, backend, prompt, n, graphs=True))
    finally:
        backend.programmatic, backend.programmatic_everything = True, every_before
    assert any(k.programmatic for k in backend._kernels.values()), "no kernel of the step is launched so"
    assert np.array_equal(runs["entries"][0], runs["plain"][0]) and np.array_equal(runs["every"][0], runs["plain"][0])
    assert runs["entries"][1] == runs["every"][1] == runs["plain"][1] == list(g["greedy_ids"])


@pytest.mark.parametrize("name", NAMES)
def test_chunked_prefill_scrambled_blocks_and_batch_match_cpu(name, backend):
    cpu, gpu, g = models(name, backend)
    prompt = list(g["prompt_ids"])
    n_blk = -(-(len(prompt) + 1) // 8)
    blocks = [5, 2, 7] + list(range(10, 10 + n_blk - 3))  # scrambled physical blocks, block size 8
    kv_c, kv_g = cpu.model.new_kv_cache(10 + n_blk, 8, state_slots=2), gpu.new_kv_cache(10 + n_blk, 8)
    try:
        for start, stop in ((0, 5), (5, 19), (19, len(prompt))):
            st = seq_step(prompt[start:stop], start, blocks, 8)
            np.testing.assert_allclose(gpu.forward(st, kv_g), cpu.model.forward(st, kv_c), atol=ATOL, rtol=0)
        # two sequences in one step: A decodes one token after its prompt, B prefills 6 tokens in blocks 4, 9
        a_pos = len(prompt)
        ids = [int(g["greedy_ids"][0])] + prompt[:6]
        bt = np.zeros((2, len(blocks)), np.int32)
        bt[0], bt[1, :2] = blocks, (4, 9)
        positions = np.array([a_pos] + list(range(6)), np.int32)
        slots = np.array([bt[0, a_pos // 8] * 8 + a_pos % 8] + [bt[1, p // 8] * 8 + p % 8 for p in range(6)])
        st = StepInput(token_ids=np.array(ids, np.int32), positions=positions, slot_mapping=slots.astype(np.int64),
                       query_start_loc=np.array([0, 1, 7], np.int32), seq_lens=np.array([a_pos + 1, 6], np.int32),
                       block_tables=bt)
        np.testing.assert_allclose(gpu.forward(st, kv_g), cpu.model.forward(st, kv_c), atol=ATOL, rtol=0)
    finally:
        kv_g.free()


def test_sampling_on_device_follows_the_host_distribution(backend):
    cpu, gpu, g = models("tiny-llama-q4_1", backend)
    prompt = g["prompt_ids"]
    kv = gpu.new_kv_cache(4, 16)
    pool = ReadbackPool(backend, slots=3)
    try:
        st = seq_step(prompt, 0, [0, 1, 2, 3], 16, [len(prompt) - 1])
        logits = gpu.forward(st, kv)[0] / 4.0      # flatter than the raw logits, so several ids are likely
        # top_k = 1 and temperature 0 are greedy
        for row in (SamplingRow(temperature=1.0, top_k=1, seed=3), SamplingRow()):
            assert int(gpu.step(st, kv, pool, [row]).get_output()["ids"][0]) == int(np.argmax(logits * 4.0))
        params = SamplingParams(temperature=0.8 * 4.0, top_k=40, top_p=0.9, min_p=0.02, seed=11)
        ids_ok, probs = filtered_probs(logits * 4.0, params)
        n = 6000
        counts = np.zeros(len(logits))
        gpu.use_graphs = True
        one = seq_step([int(prompt[-1])], len(prompt) - 1, [0, 1, 2, 3], 16)
        pending = []
        for i in range(n):
            pending.append(gpu.step(one, kv, pool, [SamplingRow.from_params(params, i)]))
            if len(pending) == 2:
                counts[int(pending.pop(0).get_output()["ids"][0])] += 1
        for p in pending:
            counts[int(p.get_output()["ids"][0])] += 1
        want = np.zeros(len(logits))
        want[ids_ok] = probs
        outside = counts[want == 0].sum()
        tv = 0.5 * np.abs(counts / n - want).sum()
        print(f"\nsampling: {len(ids_ok)} candidates, total variation {tv:.3f}, {outside} draws outside")
        assert outside == 0
        assert tv < 0.06
        # same seed and counter -> same id; the graph replays draw fresh numbers as the counter moves
        a = [int(gpu.step(one, kv, pool, [SamplingRow.from_params(params, 7)]).get_output()["ids"][0]) for _ in range(3)]
        assert len(set(a)) == 1
    finally:
        pool.close()
        gpu.drop_graphs(kv)
        kv.free()


CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from engine.backends import registry
from engine.gpu.model import GpuModel
from tests.gpu.test_gpu_forward import CAPACITY, DATA, NAMES, greedy_ids
b = registry.create({backend!r})
out = {{}}
for name in NAMES:
    m = GpuModel.load(DATA / f"{{name}}.gguf", b, **CAPACITY)
    g = np.load(DATA / f"{{name}}.golden.npz")
    out[name] = greedy_ids(m, b, g["prompt_ids"], 8, graphs=True)
    m.close()
print("IDS" + json.dumps(out))
"""


def test_blocking_launches_give_identical_ids(backend, gpu_name):
    if backend.api != "cuda" and backend.api != "hip":
        pytest.skip("no GPU api")
    var = "CUDA_LAUNCH_BLOCKING" if backend.api == "cuda" else "HIP_LAUNCH_BLOCKING"
    runs = []
    for blocking in ("0", "1"):
        env = dict(os.environ, **{var: blocking})
        r = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), backend=gpu_name)], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.split("IDS", 1)[1]))
    assert runs[0] == runs[1]
    for name in NAMES:
        golden = list(np.load(DATA / f"{name}.golden.npz")["greedy_ids"])     # some goldens run longer than 8
        assert runs[0][name] == golden[:len(runs[0][name])] and len(runs[0][name]) == 8, name


SHAPE_ALIKE = [("smollm2-135m-q4_1.gguf", 3), ("gemma-3-270m-q4_k_m.gguf", 3),
               ("qwen35-4b-shaped-q4_k_m.gguf", 1)]    # real Gated-DeltaNet shapes: Dk = Dv = 128, 32 value heads


@functools.lru_cache(maxsize=1)
def cpu_model(path: Path):
    """One CPU load per file across both bindings (the 4B one dequantizes to ~16 GB of float32)."""
    return load_model(path)


@pytest.mark.parametrize("file,prompts", SHAPE_ALIKE)
def test_shape_alike_models_first_tokens_match_cpu(file, prompts, backend):
    d = os.environ.get("HALO_SHAPE_ALIKE_DIR")
    path = Path(d) / file if d else None
    if path is None or not path.exists():
        pytest.skip("HALO_SHAPE_ALIKE_DIR does not hold " + file)
    cpu = cpu_model(path)
    gpu = GpuModel.load(path, backend, max_tokens=64, max_seqs=4, kv_blocks=8)
    rng = np.random.default_rng(5)
    try:
        for p in range(prompts):
            prompt = rng.integers(0, cpu.config.vocab_size, size=12 + 7 * p).astype(np.int32)
            kv_c, kv_g = cpu.model.new_kv_cache(8, 16), gpu.new_kv_cache(8, 16)
            try:
                ids = list(prompt)
                for step in range(3):        # first tokens: prompt, then two greedy decode steps
                    st = seq_step(ids if step == 0 else ids[-1:], 0 if step == 0 else len(ids) - 1, list(range(8)), 16)
                    want, got = cpu.model.forward(st, kv_c)[0], gpu.forward(st, kv_g)[0]
                    top = np.argsort(-want)[:10]
                    err = float(np.abs(got[top] - want[top]).max())
                    print(f"\n{file} prompt {p} step {step}: top-10 max diff {err:.2e}")
                    assert err < 0.05
                    assert int(np.argmax(got)) == int(np.argmax(want)) or \
                        abs(float(want[np.argmax(got)] - want.max())) < 0.05
                    ids.append(int(np.argmax(want)))
            finally:
                kv_g.free()
    finally:
        gpu.close()


@pytest.mark.parametrize("name", NAMES)
def test_prefill_tiles_and_kquant_decode_match_cpu_and_the_legacy_tiles(name, backend, monkeypatch):
    """A 40-token prompt (logits of its last 32 positions) through each prefill tile the device has (tensor
    cores where usable: the pipelined tck (K-quant products) / tcp and the first tc tile; the SIMT tile, the legacy warp-per-row kernels) and one decode step (the wide-load
    K-quant matvec, generic fallback for other types): logits match the CPU and each other."""
    import engine.gpu.forward as fwd_mod
    cpu, gpu, g = models(name, backend)
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, cpu.config.vocab_size, size=40).astype(np.int32)
    every = np.arange(8, 40, dtype=np.int32)               # 32 rows: the GPU's max_seqs logits rows
    launched: list[str] = []
    original = gpu.fwd._launch
    monkeypatch.setattr(gpu.fwd, "_launch", lambda f, n, *a, **k: (launched.append(n), original(f, n, *a, **k)))
    results, names = {}, {}
    for mode in (list(reversed(fwd_mod.TC_KERNELS)) if gpu.fwd.use_tc else []) + ["gt", "legacy"]:
        monkeypatch.setattr(fwd_mod, "LEGACY_TILES", mode == "legacy")
        monkeypatch.setattr(fwd_mod, "SIMT_TILES", mode == "gt")
        monkeypatch.setattr(fwd_mod, "TC_TILE", "tch" if mode == "tch128" else mode if mode in fwd_mod.TC_TILES
                            else "tck")
        monkeypatch.setattr(fwd_mod, "TCH_WIDE_MIN_T", 1 if mode == "tch128" else 1 << 30)
        launched.clear()
        kv_c, kv_g = cpu.model.new_kv_cache(4, 16), gpu.new_kv_cache(4, 16)
        try:
            want = cpu.model.forward(seq_step(prompt, 0, [0, 1, 2, 3], 16, every), kv_c)
            got = gpu.forward(seq_step(prompt, 0, [0, 1, 2, 3], 16, every), kv_g)
            nxt = [int(np.argmax(want[-1]))]
            want1 = cpu.model.forward(seq_step(nxt, 40, [0, 1, 2, 3], 16), kv_c)
            got1 = gpu.forward(seq_step(nxt, 40, [0, 1, 2, 3], 16), kv_g)
        finally:
            kv_g.free()
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
        np.testing.assert_allclose(got1, want1, atol=ATOL, rtol=0)
        results[mode], names[mode] = (got, got1), set(launched)
    for mode in results:
        print(f"\n{name} {mode}: max |{mode} - legacy| prompt "
              f"{float(np.abs(results[mode][0] - results['legacy'][0]).max()):.2e}, decode "
              f"{float(np.abs(results[mode][1] - results['legacy'][1]).max()):.2e}; "
              f"{sorted(n for n in names[mode] if n.startswith(('halo_matmul', 'halo_glu')))}")
    cfg = cpu.config
    moe = cfg.ffn_kind == "moe"                        # engine.gpu.moe's expert kernels instead of the GLU tiles
    decode = {"halo_matmul_mv_t1", "halo_matmul_kq_t1"}        # mv for Q4_K / Q6_K rows with K % 256 == 0
    glu = {"halo_moe_glu"} if moe else {"halo_glu_mv_t1", "halo_glu_kq_t1"}
    assert decode & names["gt"] and glu & names["gt"]
    if not moe and cfg.n_embd % 64 == 0 and cfg.n_ff % 32 == 0:
        assert "halo_glu_gt" in names["gt"]
        assert not gpu.fwd.use_tc or ("halo_glu_tc" in names["tc"] and "halo_glu_tcp" in names["tcp"]
                                      and names["tck"] & {"halo_glu_tck", "halo_glu_tc"}
                                      and names["tch"] & {"halo_glu_tch", "halo_glu_tc"}
                                      and names["tch128"] & {"halo_glu_tch128", "halo_glu_tc"})
