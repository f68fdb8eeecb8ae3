"""The GPU forward pass over the backend contract: the same StepInput contract as engine.model.cpu_forward.

Per step: one H2D copy of the packed step metadata (stepmeta.py), then per layer 8 launches:
    qkv matmul (3 matrices, + bias) -> q/k norm + rotary + KV write -> paged attention -> wo matmul
    -> residual + post-norm + ffn norm -> gate/up GLU matmul -> down matmul -> residual + next norm
plus the embedding (+ first norm), the LM head on the rows that need logits, and the on-device sampler.
Activations are float32 [T, width] device buffers sized once for `max_tokens` tokens.
Everything is enqueued on `self.stream`; only the sampled ids (ReadbackPool) or, for tests and the
`forward()` drop-in, the logits (a D2H copy into pinned memory behind an event) reach the host.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from engine.api import TOP_LOGITS_MAX
from engine.backends.async_output import AsyncOutput, ReadbackPool
from engine.backends.base import NULL_POINTER, Backend, DeviceBuffer, PinnedHostBuffer, pointer_or_null
from engine.backends.gpu import device_attribute
from engine.gguf.types import GGMLType
from engine.gpu.hybrid import KERNELS as HYBRID_KERNELS
from engine.gpu.hybrid import (
    DeviceLinearLayer,
    GpuRecurrentState,
    HybridScratch,
    enqueue_gated_qkv,
    enqueue_linear_attention,
    enqueue_output_gate,
)
from engine.gpu.moe import MOE_KERNELS, MOE_TC_KERNELS, MoeScratch, enqueue_moe_ffn, th_split_floats
from engine.gpu.stepmeta import MetaLayout, SamplingRow
from engine.gpu.weights import ADD_NORM_MAX_THREADS, DeviceMatrix, DeviceWeights, layer_matrices
from engine.model.arch import (
    DEFAULT_KV_CACHE_TYPE,
    FA_ROWS,
    KV_SPLIT_SCALE_KEYS,
    flash_usable,
    kv_cache_type,
    kv_split_bytes_per_token,
    rope_attention_factor,
)
from engine.model.config import ModelConfig
from engine.model.step import StepInput

MATMUL_WARPS = 4
GT_ROWS, GT_TOKENS, GT_K = 32, 64, 64      # halo_*_gt prefill tile: rows x tokens per block, k step
KQ_TOKENS = (4, 8, 16)                     # halo_*_kq_tN: batched decode, weights decoded once for N tokens
GT_MIN_T = 9                               # T above r4_t8's 8 tokens: the shared-memory tile
TC_ROWS, TC_TOKENS, TC_K = 32, 64, 32      # halo_*_tc (tensor cores, CUDA sm_80+): same tile, k stage 32
# halo_*_tcp: the pipelined tensor-core tile (engine/gpu/NOTES.md), 64 rows (GLU: 32 gate + 32 up) x 64 tokens per
# block, same k stage, split-K contract and partial sums as tc; matmul segments need rows % TCP_ROWS == 0.
# halo_*_tck: tcp for matrices of TCK_TYPES only, integer weights exact in TF32 (2 MMAs per product, not 3).
# halo_*_tch: tck's rows and split-K contract on f16 MMAs (m16n8k16), the activations split once per input into f16
# heads and tails by halo_split_f16 (split_f16_floats: its scratch; split_sum_stride: its sums' token stride); the
# default for TCK_TYPES products. H200, Qwen3-4B shapes (NOTES.md, run 13, the 64-token tile): pp128 3,852 -> 5,906
# tok/s over tck. Two builds: tch, 64 tokens per 128-thread block, and tch128, 128 tokens per
# 256-thread block (each weight tile decoded once per 128 tokens), for steps of at least TCH_WIDE_MIN_T tokens
# (HALO_GPU_TCH_WIDE_MIN_T: 1 = always, a large number = never, for comparisons). H200 run 15: tch128 is the faster
# at 128 tokens for every product (one layer 486 -> 452 us, bench_prefill_tiles.py, one call) and at 512; the whole
# 128-token step's kernels 20.9 -> 19.6 ms, pp128 6,336 -> 6,664 tok/s (two calls). Shorter steps keep tch, whose
# 64-token tile is not half empty there (not measured below 128).
TCP_ROWS = 64
TCH_BUILDS = {"tch": 64, "tch128": 128}    # build -> tokens per block; threads 2 x tokens
TCH_WIDE_MIN_T = int(os.environ.get("HALO_GPU_TCH_WIDE_MIN_T", "128"))
TCK_TYPES = frozenset({GGMLType.Q4_K, GGMLType.Q6_K})
# Split K until a prefill matmul has this many blocks (~8 per SM on an H200: the last wave stays short).
# H200 sweep, Qwen3-4B-shaped 128-token prefill: 256 -> 1967, 512 -> 2225, 1024 -> 2320, 2048 -> 2384 tok/s;
# 1024 keeps the partial-sums buffer at <= 32 MiB (2048 would double it for 3%). H100 run 19, tch128 at 512 tokens
# (docs/results/h100-run-19-split-target.txt): 256 / 512 / 1024 / 2048 / 4096 -> Qwen3-4B shapes 8,652 / 9,160 /
# 10,030 / 9,925 / 9,151 tok/s: fewer slices slow the matmuls, more cost more in halo_splitk_sum than they save.
SPLIT_TARGET_BLOCKS = 1024
SPLIT_MIN_STAGES = 8                       # ... while each split keeps at least this many 32-k stages
# ... and only for products of at least this many multiply-adds (a split costs one more launch and a pass over
# the partial sums). Set at 2^29 while a launch cost ~10-35 us of Python and the small models' prefill was bound
# by it; with launches at ~7 us (NOTES.md, "Host cost per launch") their prefill is bound by the GPU, where a
# product of a few hundred rows runs on ~40 blocks for 132 SMs. H200, 128-token prefill, fresh model per setting
# (run 12, call 7): SmolLM2 19,235 -> 30,078 tok/s, gemma-3-270m 23,797 -> 45,651 at 2^25 (2^23 and 2^21: the
# same within noise); Qwen3-4B shapes unchanged (its smallest product, wo, has 1.3e9). Then 2^21 (the same there):
# Qwen3.5's DeltaNet alpha|beta product (64 rows, K 2,560) has 2.1e7 at 128 tokens, so 2^25 left it on 4 blocks
# walking all of K: halo_matmul_tc 4.2 ms of the 28.4 ms 128-token step against 2.4 ms at 512 tokens, where it
# splits (H100 run 16; by that, ~150 us a layer for this product); split 8 ways from 2^21 (not yet timed).
SPLIT_MIN_MACS = 1 << 21
# HALO_GPU_TILES: "legacy" = the run-1 warp-per-row kernels, "gt" = the SIMT shared-memory tile even where
# tensor cores are usable; unset = the best the device has. For comparisons in tests and the benchmark.
LEGACY_TILES = os.environ.get("HALO_GPU_TILES") == "legacy"
SIMT_TILES = os.environ.get("HALO_GPU_TILES") == "gt"
# "wmma": the gt tile with its products on RDNA3 / RDNA3.5 WMMA (halo_*_wm, 3xF16; WMMA_ARCHS only). Opt-in: it has
# only been compiled (the prebuilt gfx11 objects), never run on an AMD GPU, so the FMA tile stays the default.
WMMA_TILES = os.environ.get("HALO_GPU_TILES") == "wmma"
WMMA_ARCHS = frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151"})
# Which tensor-core tile: "auto" (unset: the best measured for each product, see _tc_tile / _glu_tile: tch for
# TCK_TYPES), or "tch" / "tck" / "tcp" / "tc" (HALO_GPU_TILES=...: tch or the TF32 tck wherever the types allow / the
# pipelined tile for every type / the first tile everywhere, for comparisons)
TC_TILES = ("tc", "tcp", "tck", "tch")       # the HALO_GPU_TILES values that name a tensor-core tile
TC_KERNELS = TC_TILES + ("tch128",)         # their kernels: tch has a second build for wide steps (TCH_BUILDS)
TC_TILE = {t: t for t in TC_TILES}.get(os.environ.get("HALO_GPU_TILES", ""), "auto")
# "auto" keeps products of fewer weights than this on tc: the pipelined tiles' 64-row blocks leave a small model's
# matrices few blocks (H200, 128-token prefill: SmolLM2 13,799 tok/s with them vs 18,746 on tc, gemma-3-270m 20,264
# vs 23,850; their largest matrix has 1.3 M weights), while every Qwen3-4B product (>= 10.5 M) gains (3,283 -> 3,656)
PIPELINED_MIN_WEIGHTS = 1 << 23
# HALO_GPU_KQ_BATCH=1: steps of 2..16 tokens take halo_*_kq_t{4,8,16} instead of r1_t4 / r4_t8 / the tile.
# Off by default: on the H200 it did not raise batched decode (engine/gpu/NOTES.md), so the measured path stays.
KQ_BATCH = os.environ.get("HALO_GPU_KQ_BATCH") == "1"
# halo_*_bq_t16: steps of BQ_MIN_T..16 tokens (batched decode) where every matrix is Q4_K or Q6_K and K % 256 == 0:
# BQ_ROWS rows per block share each activation staged once in shared memory. H200, Qwen3-4B shapes, graph step
# (docs/results/h200-batched-decode-bq.txt): 16 tokens 40.6 -> 24.5 ms; at 4 and 8 tokens the same scheme
# (bq_t8) lost to r1_t4 / r4_t8 (8.2 -> 13.0 ms, 13.1 -> 14.4 ms), so those keep them. HALO_GPU_BQ=0 keeps the
# prefill tile for 9..16 tokens too (for comparisons).
BQ_TOKENS, BQ_MIN_T, BQ_ROWS, BQ_TYPES = (16,), 9, 16, frozenset({GGMLType.Q4_K, GGMLType.Q6_K})
BQ_BATCH = os.environ.get("HALO_GPU_BQ") != "0"
BQ_TARGET_BLOCKS = 512                     # split K of bq_t16 below this many blocks (~4 per SM on an H200)
# halo_*_mv_t1: single-token steps of Q4_K / Q6_K rows (K % 256 == 0, every segment's rows % 4 == 0; else kq_t1):
# MV_R rows per warp share each activation load, MV_WARPS warps per block, K split over 1, 2 or 4 of them
# (mv_split_warps). HALO_GPU_MV_MAX_T=0 turns it off (kq_t1, for comparisons).
MV_TOKENS, MV_WARPS, MV_R = (1,), 4, 2
MV_MAX_T = int(os.environ.get("HALO_GPU_MV_MAX_T", "1"))
# The matmul's rows per warp column: MV_R (halo_matmul_mv_t1) or 2 MV_R (halo_matmul_mv4_t1, the GLU's count: twice
# the bytes in flight per warp, half the blocks), chosen per launch by mv_matmul_shape; HALO_GPU_MV_MATMUL_R=2 or 4
# takes one everywhere (for comparisons). Blocks of each a multiprocessor holds (H100, the runtime's occupancy for 128
# threads: MV_R at 95 registers a thread, 2 MV_R at 128; neither spills).
MV_MATMUL_KERNELS = {MV_R: "halo_matmul_mv_t1", 2 * MV_R: "halo_matmul_mv4_t1"}
MV_MATMUL_BLOCKS_PER_SM = {MV_R: 5, 2 * MV_R: 4}
MV_MATMUL_R = int(os.environ.get("HALO_GPU_MV_MATMUL_R", "0"))
# halo_*_tn_t{8,16}: batched decode on tensor cores (CUDA sm_80+; HIP keeps bq_t16 / r1_t4 / r4_t8): steps of
# TN_MIN_T..16 tokens where every matrix is Q4_K or Q6_K, K % 256 == 0 and every segment's rows % TN_ROWS == 0.
# A block of TN_WARPS warps takes TN_WARPS x TN_ROWS rows and one K slice (k_slices up to TN_TARGET_BLOCKS, each
# slice >= 2 super-blocks; partial sums + halo_splitk_sum). HALO_GPU_TN_MIN_T=1 lets single-token steps take it
# too (for comparison with mv_t1: half its speed on the H200); 17 turns it off.
TN_TOKENS, TN_WARPS, TN_ROWS = (8, 16), 8, 16
TN_MIN_T = int(os.environ.get("HALO_GPU_TN_MIN_T", "2"))
TN_TARGET_BLOCKS = int(os.environ.get("HALO_GPU_TN_BLOCKS", "264"))     # ~2 per SM on an H200
ATTN_WARPS = 8
# Split-KV (flash-decoding) attention, halo_attention_split + halo_attention_merge: for steps of at most
# SKV_MAX_T tokens (decode batches) where the kernel's limits hold (head_dim <= SKV_MAX_D, GQA group <=
# SKV_MAX_GROUP); other steps keep halo_attention's block per (token, head). The grid always has skv_chunks(T)
# blocks per (token, kv head); the kernel cuts each token's keys into that many chunks of at least 16 positions
# from its own depth (read on the device, so a captured graph replays at any depth; chunks past the last key
# exit at once).
SKV_MAX_T, SKV_WARPS, SKV_MAX_GROUP, SKV_MAX_D = 16, 4, 8, 256
SKV_GROUPS = (2, 4, 8)                     # builds per GQA group size (rounded up): q and acc registers scale with it
SKV_WIDTHS = (64, 128, SKV_MAX_D)          # builds per head-size class (split_kernel)
SKV_CHUNKS = 64                            # ... for one token; skv_chunks: fewer per token as tokens add blocks
SKV_MIN_CHUNKS = 4
SKV_MERGE_MAX_THREADS = 512               # halo_attention_merge: merge_threads
assert 32 * SKV_WARPS >= SKV_CHUNKS
# HALO_SKV_FUSED=1: the last split block of each (token, kv head) merges the chunks (one launch per layer fewer).
# Off by default: that block merges its G heads one after another, which cost more than the launch it saves (H200,
# decode tok/s fused vs separate merge: SmolLM2 846 vs 888, gemma-3-270m 778 vs 841, Qwen3-4B shapes 293 vs 307); run 11,
# attention per step at depth 192 on the Qwen3-4B shapes: 878 vs 451 us, bench_attention.py).
SKV_FUSED = os.environ.get("HALO_SKV_FUSED") == "1"
# halo_attention_split_mma_d{64,128}_f16: the split kernel on tensor cores for an f16 cache where the device has them
# (split_kernel); HALO_SKV_MMA=0 keeps the SIMT builds.
SKV_MMA_WIDTHS = (64, 128)
SKV_MMA = os.environ.get("HALO_SKV_MMA") != "0"
# Tiled prefill attention on tensor cores (halo_attention_tc, CUDA sm_80+): steps of more than SKV_MAX_T tokens
# of a model whose heads it takes (arch.flash_usable: FA_ROWS, FA_MAX_D); a block takes rows // group tokens x the
# group's heads, 2 x rows threads, fa_block_rows picks the rows per step.
# A float32 cache's prefill steps split their keys once (halo_kv_split, FA_KEYS-key tiles; GpuKVCache holds the
# copy) for halo_attention_tc_split, whose block takes FA_SPLIT_SHARED_BYTES of dynamic shared memory; the tile
# halo_attention_tc splits K / V in every block of queries, 64 blocks a kv head in a 2,048-token step (decode
# graphs keep it: their grid cannot follow the depth). HALO_FA_SPLIT=0: that tile everywhere (comparisons).
FA_KEYS, FA_SPLIT_SHARED_BYTES = 32, 70144
FA_SPLIT = os.environ.get("HALO_FA_SPLIT") != "0"
# The copy costs about what splitting a sequence's keys in FA_SPLIT_MIN_REUSE more blocks of queries does (a read and
# a write of each key, and the tile's read of the copy, against the tile's read of the cache): a step takes it where
# its blocks would split its keys that many times more than once (a prompt's step: dozens; a decode token: never).
FA_SPLIT_MIN_REUSE = 2


def split_pays(tokens: np.ndarray, keys: np.ndarray, block_tokens: int) -> bool:
    """Whether a step whose sequences have `tokens` tokens and `keys` keys each splits its keys once (halo_kv_split)
    rather than in every block of `block_tokens` tokens that reads them: the splits it saves (each sequence's keys x
    its blocks past the first) against FA_SPLIT_MIN_REUSE x the keys it splits."""
    blocks = -(-np.asarray(tokens, np.int64) // block_tokens)
    keys = np.asarray(keys, np.int64)
    return int(np.sum(keys * (blocks - 1))) >= FA_SPLIT_MIN_REUSE * int(np.sum(keys))
# Where that tile is not built or does not fit (HIP, Strix Halo included), the SIMT tile halo_attention_ts_d{class}
# (float32 FMAs): the same blocks with TS_ROWS[class] query rows, builds per head-size class (ts_kernel).
# HALO_GPU_FLASH: unset, the tensor-core tile where usable, else the SIMT one where usable; "simt": the SIMT tile
# everywhere it fits (comparisons); "0": halo_attention, a block per (token, head), for every prefill.
TS_ROWS = {64: 32, 128: 32, 256: 16}
FLASH_MODE = os.environ.get("HALO_GPU_FLASH", "auto")
# The SIMT tile pays once a step's keys are many. Its grid is ceil(T / (R / G)) x Hkv blocks, each walking its keys
# tile by tile, so a short prompt gets a few dozen serial blocks, while halo_attention's cache traffic (T x H x context
# rows) is still small: H200 run 15, gemma-3-270m shapes (D 256, one KV head), 128-token prompt: 1.48 ms of attention
# on the tile against ~0.45 ms on halo_attention (42,855 -> 31,998 tok/s). Prefill steps whose longest sequence has
# fewer than TS_MIN_CONTEXT keys keep halo_attention, and so does a sliding-window layer whose window is shorter (no
# query there sees more keys). H100 run 16, the tile in every layer against none, prompts of 128 / 512 / 2,048 tokens:
# gemma-3 shapes (one KV head, 5 of 6 layers windowed at 512) 30.9k / 46.9k / 40.2k against 29.0k / 63.8k / 49.9k
# tok/s; Qwen3.5 shapes (full-attention layers, four KV heads) 4,567 / 6,471 / 6,047 against 4,593 / 6,379 / 5,676.
# HALO_GPU_FLASH=simt takes the tile at any length.
TS_MIN_CONTEXT = 1024
STAGING_SLOTS = 4


def view(buf: DeviceBuffer, offset: int, n: int, dtype=None) -> DeviceBuffer:
    """Elements [offset, offset + n) of `buf` as their own DeviceBuffer (same memory, never freed itself)."""
    dtype = np.dtype(dtype or buf.dtype)
    start = offset * buf.dtype.itemsize
    storage = buf._storage                      # the CPU backend's memory (None on a GPU)
    if storage is not None:
        storage = storage[start:start + n * dtype.itemsize]
    return DeviceBuffer(buf.backend, buf.ptr + start, (n,), dtype, storage=storage)


def tensor_cores_usable(backend: Backend) -> bool:
    """halo_*_tc need mma.sync TF32: CUDA compute capability 8.0 or newer (HIP keeps the SIMT tile)."""
    arch = getattr(backend, "arch", "")
    return backend.api == "cuda" and arch.startswith("sm_") and arch[3:].isdigit() and int(arch[3:]) >= 80


def _tc_tile(types: set[int], weights: int) -> str:
    """The tensor-core matmul tile for a product of `weights` weights of these types: tch (integer K-quant weights on
    f16 MMAs; tck, their TF32 tile, under HALO_GPU_TILES=tck) where every type is a TCK_TYPES one, else tcp (all
    faster than tc for every Qwen3-4B matmul shape on the H200); tc for products under PIPELINED_MIN_WEIGHTS
    (TC_TILE "auto") or everywhere (TC_TILE "tc")."""
    if TC_TILE == "tc" or (TC_TILE == "auto" and weights < PIPELINED_MIN_WEIGHTS):
        return "tc"
    if TC_TILE == "tcp" or not types <= TCK_TYPES:
        return "tcp"
    return "tck" if TC_TILE == "tck" else "tch"


def _glu_tile(types: set[int], weights: int) -> str:
    """The tensor-core GLU tile (weights: of one of gate / up): tch (tck under HALO_GPU_TILES=tck) for TCK_TYPES
    gate and up, else tc (tcp's GLU, 4 warps per block, measured slower than tc's 8-warp one on the H200: 518 vs
    455 us at 128 tokens); tc for products under PIPELINED_MIN_WEIGHTS (TC_TILE "auto"), unless HALO_GPU_TILES
    names a tile."""
    if TC_TILE in ("tc", "tcp"):
        return TC_TILE
    if TC_TILE == "auto" and weights < PIPELINED_MIN_WEIGHTS:
        return "tc"
    if not types <= TCK_TYPES:
        return "tc"
    return "tck" if TC_TILE == "tck" else "tch"


def _tch_build(T: int) -> tuple[str, int]:
    """The tch build for a step of T tokens: (kernel suffix, tokens per block)."""
    build = "tch128" if T >= TCH_WIDE_MIN_T else "tch"
    return build, TCH_BUILDS[build]


def wmma_usable(backend: Backend) -> bool:
    """halo_*_wm need v_wmma_f32_16x16x16_f16 in wave32: RDNA3 and RDNA3.5 (gfx11; RDNA4's WMMA differs)."""
    return backend.api == "hip" and getattr(backend, "arch", "").split(":", 1)[0] in WMMA_ARCHS


def splitk_floats(config: ModelConfig, max_tokens: int) -> int:
    """Capacity of the split-K partial sums buffer. Splitting stops below 2 x SPLIT_TARGET_BLOCKS blocks of
    TC_ROWS x TC_TOKENS outputs, GLU's two planes included, and never needs more than splits x T x rows."""
    widest = max(config.q_dim + 2 * config.kv_dim, config.n_embd, 2 * config.n_ff)
    return min(2 * SPLIT_TARGET_BLOCKS * TC_ROWS * TC_TOKENS * 2, 8 * max_tokens * widest)


def split_sum_stride(T: int) -> int:
    """halo_split_f16's token stride ls of its sums for T tokens: T rounded up to a multiple of either tch
    build's tokens per block."""
    widest = max(TCH_BUILDS.values())
    return -(-T // widest) * widest


def split_f16_floats(T: int, K: int) -> int:
    """Scratch (in float32 words) of halo_split_f16 for T tokens of K activations: f16 heads and tails (T x K each),
    the sums of every 32-k sub-block (an f16 head and tail each: 32 bytes per super-block and token, over
    split_sum_stride(T) tokens, the size of one float32 per sub-block) and one exponent per token. _split_f16 lays
    them out in this order."""
    return T * K + (K // 32) * split_sum_stride(T) + T


def split_f16_scratch(config: ModelConfig, max_tokens: int) -> int:
    """halo_split_f16's scratch for any product input of this model (split_f16_floats of its widest), or of its
    MoE experts' th tiles (engine.gpu.moe.th_split_floats) where those are larger."""
    return max(split_f16_floats(max_tokens, max(config.n_embd, config.q_dim, config.n_ff)),
               th_split_floats(config, max_tokens))


def tch_possible(types) -> bool:
    """Whether a model whose matrices have these types can run the tch tile by default (it keeps the scratch of
    split_f16_scratch from the start: allocating it later could fall inside a graph capture)."""
    return TC_TILE in ("auto", "tch") and bool(set(types) & TCK_TYPES)


def split_k(base_blocks: int, K: int, partial_floats: int, capacity: int) -> int:
    """How many K slices a tensor-core matmul of `base_blocks` blocks gets: doubled while the grid is smaller
    than SPLIT_TARGET_BLOCKS, each slice stays a multiple of TC_K with >= SPLIT_MIN_STAGES stages, and the
    partial sums (`partial_floats` per slice) fit `capacity`."""
    splits = 1
    while (base_blocks * splits < SPLIT_TARGET_BLOCKS and K % (2 * splits * TC_K) == 0
           and K // (2 * splits) >= SPLIT_MIN_STAGES * TC_K and 2 * splits * partial_floats <= capacity):
        splits *= 2
    return splits


def k_slices(base_blocks: int, super_blocks: int, plane: int, capacity: int, target: int = BQ_TARGET_BLOCKS,
             min_super_blocks: int = 4) -> int:
    """K slices of a launch of `base_blocks` blocks over rows of `super_blocks` super-blocks (bq_t16, tn_tN): doubled
    while the grid is under `target` blocks and every slice keeps >= `min_super_blocks`, within the partial
    buffer (`plane` floats per slice). bq_t16 at 16 tokens on Qwen3-4B: down (160 blocks, 38 super-blocks) and wo
    (160, 16) split 4 ways; tn_t16 (TN_TARGET_BLOCKS, 2): q|k|v 4, wo 8, down 16, gate/up 4."""
    splits = 1
    while (base_blocks * splits < target and super_blocks // (2 * splits) >= min_super_blocks
           and 2 * splits * plane <= capacity):
        splits *= 2
    return splits


def split_kv_usable(config: ModelConfig) -> bool:
    c = config
    return (c.head_dim <= SKV_MAX_D and c.head_dim % 8 == 0 and c.n_head_kv > 0 and c.n_head % c.n_head_kv == 0
            and c.n_head // c.n_head_kv <= SKV_MAX_GROUP)


def kv_suffix(f16: bool) -> str:
    """Kernel-name suffix of the halo_layer.cu builds that read or write an f16 KV cache."""
    return "_f16" if f16 else ""


def split_kernel(head_dim: int, group: int, f16: bool, tensor_cores: bool = False) -> tuple[str, int]:
    """(name, walkers per warp) of the halo_attention_split build for heads of `head_dim` in GQA groups of
    `group` (split_kv_usable): with tensor cores (tensor_cores_usable) and an f16 cache, the MMA build of the head
    size where there is one (a walker per warp); else the smallest head-size class that holds the head, the smallest
    group build that holds the group. A key row is read by min(32, class bytes / 16) lanes, so a warp walks 32 / that
    keys at a time (the kernel's table of builds; tests/unit/test_kernel_constants.py holds the two to each other)."""
    if tensor_cores and f16 and SKV_MMA and head_dim in SKV_MMA_WIDTHS:
        return f"halo_attention_split_mma_d{head_dim}{kv_suffix(f16)}", 1
    width = next(w for w in SKV_WIDTHS if w >= head_dim)
    g = next(n for n in SKV_GROUPS if n >= group)
    lanes = min(32, width * (2 if f16 else 4) // 16)
    return f"halo_attention_split_d{width}{kv_suffix(f16)}_g{g}", 32 // lanes


def merge_threads(head_dim: int, chunks: int) -> int:
    """halo_attention_merge's block: a thread per dim for each group the chunks may be cut into (up to 4 groups of
    >= 16 chunks, summed apart; the kernel uses one group per 16 chunks that saw a key), at most
    SKV_MERGE_MAX_THREADS. Four groups took the merge from 6 to 4 us per layer at 64 live chunks (H200); at a
    short depth one group does, and the kernel takes one there."""
    groups = max(1, min(4, chunks // 16))
    return min(SKV_MERGE_MAX_THREADS, -(-groups * head_dim // 32) * 32)


def split_shared_bytes(head_dim: int, group: int, f16: bool, tensor_cores: bool = False) -> int:
    """Dynamic shared memory of a halo_attention_split launch: every walker's (acc, m, l) per head."""
    return 4 * SKV_WARPS * split_kernel(head_dim, group, f16, tensor_cores)[1] * group * (head_dim + 2)


def fa_block_rows(T: int, group: int, n_head_kv: int, multiprocessors: int) -> int:
    """The query rows of a tiled-attention block for a T-token step: FA_ROWS[-1] where that grid still gives at
    least 3/4 of the SMs a block, else FA_ROWS[0]. Both hold 8 warps an SM (registers: 2 blocks of 4 warps or one
    of 8); the wide block stages and splits each K / V tile once for twice the rows: faster for the Qwen3-4B shapes'
    512-token steps (128 wide blocks on an H100's 132 SMs), ~2% slower prefill at 128 tokens (32 blocks; NOTES.md,
    "The float32 cache's tile on f16 MMAs, run 19"). multiprocessors 0 (the runtime could not say): narrow."""
    wide = FA_ROWS[-1]
    blocks = -(-T // (wide // group)) * n_head_kv
    return wide if group <= wide and 4 * blocks >= 3 * multiprocessors > 0 else FA_ROWS[0]


def ts_class(head_dim: int) -> int | None:
    """The SIMT tile's head-size class for this head (the smallest that holds it), or None past the largest."""
    return next((w for w in TS_ROWS if w >= head_dim), None)


def ts_usable(config: ModelConfig) -> bool:
    c = config
    cls = ts_class(c.head_dim)
    return (cls is not None and c.head_dim % 4 == 0 and c.n_head_kv > 0 and c.n_head % c.n_head_kv == 0
            and c.n_head // c.n_head_kv <= TS_ROWS[cls])


def ts_kernel(head_dim: int, f16: bool) -> str:
    return f"halo_attention_ts_d{ts_class(head_dim)}{kv_suffix(f16)}"


def add_norm_threads(E: int) -> int:
    """halo_add_norm's block for rows of E: ~4 elements per thread (each thread's loads in flight together),
    within its contract E <= ADD_NORM_PER_THREAD x threads (engine.gpu.weights.gpu_refusal turns away wider
    models)."""
    return min(ADD_NORM_MAX_THREADS, max(32, -(-E // 128) * 32))


def mv_split_warps(K: int) -> int:
    """Warps of a halo_*_mv block that share one row group's K (1, 2 or 4): as many as keep >= 2 loop trips per
    lane group, a trip being 4 super-blocks per warp (8 lanes per 256 weights). Short rows stay on one warp (no
    shared-memory reduction); long ones (a 4B model's down projection, K = 9,728) spread over 4, so the few rows
    of such a matrix still fill the GPU. The GLUs' split, and the most a matmul's (mv_matmul_shape picks there where
    the multiprocessors are known)."""
    trips = K / 1024
    return 4 if trips >= 8 else 2 if trips >= 4 else 1


def mv_blocks(rows: int, rows_per_warp: int, kw: int) -> int:
    """Blocks of a halo_*_mv launch over `rows` rows: each holds MV_WARPS / kw warp columns of rows_per_warp rows."""
    return -(-rows // (rows_per_warp * MV_WARPS // kw))


def mv_matmul_shape(rows: int, K: int, multiprocessors: int) -> tuple[int, int]:
    """(kw, R) of a single-token matmul of `rows` rows: the K split (warps of a block sharing a row group's K, any the
    row length allows: >= 2 trips a lane group, up to mv_split_warps' count) and rows per warp column (MV_R or 2 MV_R)
    that fit the launch in the fewest waves of blocks, and of those the launch of most blocks (more rows in flight).
    H100, Qwen3-4B shapes, us a decode step, each role's launches as one graph (run 33): q|k|v (6,144 rows) at 4 rows a
    warp 385 -> 316 (768 blocks for 660 slots -> 384 for 528), but wo (one wave either way) 214 -> 250 and down
    574 -> 620; down on 2 warps instead of 4 (640 blocks in one wave, not 1,280 in two) 573 -> 493, on 1 817. Decode,
    alternating three times: R = 2 and mv_split_warps everywhere 370.9 tok/s, + 4 rows where a wave fewer 372.7, + down
    on 2 warps 383.5 (Qwen3.5-4B shapes 324.8 / 334.3 / 341.7; gemma-3 unchanged). multiprocessors 0 (the runtime
    could not say, or not CUDA: the block counts are sm_90's): mv_split_warps(K) and MV_R."""
    if MV_MATMUL_R or not multiprocessors:
        return mv_split_warps(K), MV_MATMUL_R or MV_R
    best = None
    for kw in (1, 2, 4):
        if kw > mv_split_warps(K):
            break
        for r in (MV_R, 2 * MV_R):
            blocks = mv_blocks(rows, r, kw)
            waves = -(-blocks // (MV_MATMUL_BLOCKS_PER_SM[r] * multiprocessors))
            if best is None or (waves, -blocks) < best[0]:
                best = (waves, -blocks), (kw, r)
    return best[1]


def skv_chunks(T: int) -> int:
    """Chunks per (token, kv head) of a split-KV launch of T tokens: SKV_CHUNKS for one, halved while T x chunks
    exceeds SKV_CHUNKS (down to SKV_MIN_CHUNKS), so a batch's launch keeps about one token's block count. With 64
    chunks for each of 16 tokens (8,192 blocks on the 4B shapes) most blocks found no key at a short depth and the
    launches alone took 83 us per layer (H200, depth 192: 28% of the 16-token step)."""
    n = SKV_CHUNKS
    while n > SKV_MIN_CHUNKS and n * T > SKV_CHUNKS:
        n //= 2
    return n


def split_kv_parts(config: ModelConfig, max_tokens: int) -> int:
    """Floats of the split-KV partials: (tokens, heads, chunks, head_dim + 2), 0 when unused."""
    if not split_kv_usable(config):
        return 0
    return min(max_tokens, SKV_MAX_T) * config.n_head * SKV_CHUNKS * (config.head_dim + 2)


def split_kv_floats(config: ModelConfig, max_tokens: int) -> int:
    """Capacity of the split-KV buffer: the partials, then one int32 counter per (token, kv head) for the fused
    merge."""
    parts = split_kv_parts(config, max_tokens)
    return parts and parts + min(max_tokens, SKV_MAX_T) * config.n_head_kv


@dataclass(frozen=True)
class Matrices:
    """What a matmul launch needs of its 1..3 matrices (one K; q|k|v stacked by rows, or gate and up side by side),
    worked out once per matrices (GpuForward.matrices): the weights never change after upload, nor does any of this."""
    rows: int                 # summed over the matrices
    K: int
    types: frozenset[int]
    rows_div4: bool           # every matrix's rows % 4 == 0 (_tile)
    tile_ok: bool             # ... % GT_ROWS == 0 and K % GT_K == 0: the shared-memory tiles
    bq_ok: bool               # Q4_K / Q6_K only and K % 256 == 0: bq, mv, tn
    tn_ok: bool               # rows % TN_ROWS == 0 each: tn
    tcp_ok: bool              # rows % TCP_ROWS == 0 each: the pipelined tensor-core tiles
    segments: tuple           # halo_matmul_*'s 3 x (weights, type, rows, row bytes), unused segments NULL_POINTER / 0
    K32: np.int32

    @staticmethod
    def of(mats: tuple[DeviceMatrix, ...]) -> Matrices:
        K = mats[0].cols
        segments = []
        for m in mats:
            segments += [m.buf, np.int32(m.ggml_type), np.int32(m.rows), np.int32(m.row_bytes)]
        segments += [NULL_POINTER, np.int32(0), np.int32(0), np.int32(0)] * (3 - len(mats))
        return Matrices(sum(m.rows for m in mats), K, frozenset(m.ggml_type for m in mats),
                        all(m.rows % 4 == 0 for m in mats), all(m.rows % GT_ROWS == 0 for m in mats) and K % GT_K == 0,
                        all(m.ggml_type in BQ_TYPES for m in mats) and K % 256 == 0,
                        all(m.rows % TN_ROWS == 0 for m in mats), all(m.rows % TCP_ROWS == 0 for m in mats),
                        tuple(segments), np.int32(K))


@dataclass(frozen=True)
class LayerArgs:
    """An attention layer's halo_rope_kv arguments and the arguments every attention kernel opens with, for one KV
    cache: none depends on the step (T is passed apart), so GpuForward.layer_args makes them once."""
    rope: tuple
    attention: tuple


class GpuKVCache:
    """Per attention layer K and V, [num_blocks, block_size, n_kv, head_dim] of `kv_type` (float32 or f16:
    engine.model.arch.KV_CACHE_TYPES), in one allocation (None for linear-attention layers, whose recurrent
    state of `state_slots` sequences is `recurrent`), plus the step metadata buffers sized by this cache
    (block-table width = num_blocks) and, for float32, the prefill split copy of one layer (`split`, FA_SPLIT)."""

    def __init__(self, backend: Backend, config: ModelConfig, num_blocks: int, block_size: int,
                 max_tokens: int, max_seqs: int, stream, state_slots: int = 0, kv_type: str = DEFAULT_KV_CACHE_TYPE):
        if block_size <= 0 or block_size & (block_size - 1):
            raise ValueError(f"the GPU KV cache's block size must be a power of two (the kernels shift by it), "
                             f"not {block_size}")
        self.backend, self.num_blocks, self.block_size = backend, num_blocks, block_size
        self.kv_type = kv_cache_type(kv_type, "gpu")
        self.f16 = self.kv_type == "f16"
        dtype = np.dtype(np.float16 if self.f16 else np.float32)
        per = num_blocks * block_size * config.kv_dim
        attn = [i for i, kind in enumerate(config.layer_kinds) if kind == "attention"]
        self.nbytes = 2 * len(attn) * per * dtype.itemsize      # what is allocated; arch.kv_cache_bytes says it too
        self.storage = backend.alloc(max(1, 2 * len(attn) * per), dtype)
        backend.memset_async(self.storage, 0, stream)
        self.k: list[DeviceBuffer | None] = [None] * config.n_layers
        self.v: list[DeviceBuffer | None] = [None] * config.n_layers
        for j, i in enumerate(attn):
            self.k[i] = view(self.storage, (2 * j) * per, per)
            self.v[i] = view(self.storage, (2 * j + 1) * per, per)
        self.recurrent = GpuRecurrentState(backend, config, state_slots, stream) if len(attn) < config.n_layers \
            else None
        self.nbytes += self.recurrent.nbytes if self.recurrent else 0
        # the prefill split copy of one layer's K and V (heads, tails) and its tiles' factors (FA_KEYS above)
        slots = num_blocks * block_size
        split = kv_split_bytes_per_token(config, "gpu", self.kv_type) * slots
        self.split = backend.alloc(split // 2, np.uint16) if split else None
        self.split_k = view(self.split, 0, 2 * slots * config.kv_dim) if split else None
        self.split_v = view(self.split, 2 * slots * config.kv_dim, 2 * slots * config.kv_dim) if split else None
        scale_floats = slots // KV_SPLIT_SCALE_KEYS * config.n_head_kv * 4
        self.split_scales = view(self.split, 4 * slots * config.kv_dim, scale_floats, np.float32) if split else None
        self.nbytes += split
        self.layout = MetaLayout(max_tokens, max_seqs, num_blocks)
        self.meta = backend.alloc(self.layout.words, np.int32)
        backend.memset_async(self.meta, 0, stream)
        self.staging = [backend.alloc_pinned(self.layout.words, np.int32) for _ in range(STAGING_SLOTS)]
        self.staged = [backend.create_event() for _ in range(STAGING_SLOTS)]
        self.staged_used = [False] * STAGING_SLOTS
        self._next = 0
        L = self.layout
        self.ids = view(self.meta, L.ids, max_tokens)
        self.positions = view(self.meta, L.positions, max_tokens)
        self.slots = view(self.meta, L.slots, max_tokens)
        self.token_seq = view(self.meta, L.token_seq, max_tokens)
        self.logits_idx = view(self.meta, L.logits_idx, max_seqs)
        self.samp_i = view(self.meta, L.samp_i, 4 * max_seqs)
        self.samp_f = view(self.meta, L.samp_f, 4 * max_seqs, np.float32)
        self.seq_lens = view(self.meta, L.seq_lens, max_seqs)
        self.qsl = view(self.meta, L.qsl, max_seqs + 1)
        self.state_slots = view(self.meta, L.state_slots, max_seqs)
        self.block_tables = view(self.meta, L.block_tables, max_seqs * num_blocks)
        # the id of the token at each KV slot (-1: never written): the repetition penalty's history
        self.token_at_slot = backend.alloc(num_blocks * block_size, np.int32)
        self.nbytes += num_blocks * block_size * 4          # counted like arch.kv_bytes_per_token(..., "gpu")
        backend.memset_async(self.token_at_slot, 0xFF, stream)
        self.context = 0                                    # the last uploaded step's longest sequence, in keys
        self.step_starts = self.step_keys = np.zeros(0, np.int32)  # the last step's query_start_loc, seq_lens

    def upload(self, step: StepInput, sampling: list[SamplingRow] | None, stream, ids_on_device: bool) -> None:
        """Pack `step` into the next pinned staging slot and queue its H2D copy on `stream`."""
        if self.recurrent is not None and step.num_seqs and int(np.max(step.state_slots)) >= self.recurrent.slots:
            raise ValueError(f"recurrent-state slot {int(np.max(step.state_slots))} beyond the cache's "
                             f"{self.recurrent.slots} slots")
        i = self._next
        self._next = (i + 1) % STAGING_SLOTS
        if self.staged_used[i]:
            self.staged[i].synchronize()          # the copy that last read this slot has run (almost always)
        host = self.staging[i]
        words = self.layout.pack(step, sampling, host.array)
        self.context = int(step.seq_lens.max()) if step.num_seqs else 0
        self.step_starts, self.step_keys = step.query_start_loc[:step.num_seqs + 1], step.seq_lens[:step.num_seqs]
        start = self.layout.positions if ids_on_device else 0
        src = PinnedHostBuffer(self.backend, host.ptr + 4 * start, host.array[start:words])
        self.backend.copy_h2d_async(view(self.meta, start, words - start), src, stream)
        self.staged[i].record(stream)
        self.staged_used[i] = True

    def free(self) -> None:
        b = self.backend
        b.synchronize()
        b.free(self.storage)
        b.free(self.meta)
        b.free(self.token_at_slot)
        if self.split is not None:
            b.free(self.split)
        if self.recurrent is not None:
            self.recurrent.free()
        for p in self.staging:
            b.free_pinned(p)
        for e in self.staged:
            b.destroy_event(e)


class GpuForward:
    """Config + device weights + scratch. Not thread-safe: the engine thread owns it. `stream` (made here when not
    given) is this object's: free() destroys it."""

    def __init__(self, backend: Backend, config: ModelConfig, weights: DeviceWeights, max_tokens: int = 512,
                 max_seqs: int = 64, stream=None):
        self.backend, self.config, self.w = backend, config, weights
        self.max_tokens, self.max_seqs = max_tokens, max_seqs
        self.stream = stream or backend.create_stream()
        c = config
        self.qkv_width = c.q_dim + 2 * c.kv_dim
        T = max_tokens
        self.x = backend.alloc((T, c.n_embd), np.float32)
        self.h = backend.alloc((T, c.n_embd), np.float32)
        self.o = backend.alloc((T, c.n_embd), np.float32)
        self.qkv = backend.alloc((T, self.qkv_width), np.float32)
        self.attn = backend.alloc((T, c.q_dim), np.float32)
        self.act = backend.alloc((T, c.n_ff), np.float32)
        self.logits = backend.alloc((max_seqs, c.vocab_size), np.float32)
        self.sampled = backend.alloc(max_seqs, np.int32)
        self.seen = backend.alloc((max_seqs, -(-c.vocab_size // 32)), np.uint32)   # sampler's penalty bitmaps
        self.top_ids = backend.alloc((max_seqs, TOP_LOGITS_MAX), np.int32)          # reported top pairs
        self.top_vals = backend.alloc((max_seqs, TOP_LOGITS_MAX), np.float32)
        self.use_tc = tensor_cores_usable(backend)
        self.use_wmma = WMMA_TILES and wmma_usable(backend)
        # split-K partial sums: the tensor-core tile and bq_t16 split (the pre-flight counts them on every device)
        self.partial_cap = splitk_floats(c, max_tokens)
        self.partial = backend.alloc(max(self.partial_cap, 1), np.float32)
        self.attn_part = backend.alloc(max(split_kv_floats(c, max_tokens), 1), np.float32)
        backend.memset_async(self.attn_part, 0, self.stream)     # the fused merge's counters start at 0
        parts = split_kv_parts(c, max_tokens)
        self.attn_count = view(self.attn_part, parts, split_kv_floats(c, max_tokens) - parts, np.int32)
        self.split_kv = split_kv_usable(c) and os.environ.get("HALO_SPLIT_KV") != "0"
        # prefill attention: the tensor-core tile (flash), else the SIMT tile (ts), else halo_attention
        self.flash = self.use_tc and FLASH_MODE not in ("0", "simt") and flash_usable(c)
        # CUDA's (the flash tile's block rows, the decode matmul's rows per warp); HIP measured neither: 0
        self.multiprocessors = device_attribute(backend, "multiprocessor_count") if backend.api == "cuda" else 0
        self.ts = FLASH_MODE != "0" and not self.flash and ts_usable(c)
        self.ts_min_context = 0 if FLASH_MODE == "simt" else TS_MIN_CONTEXT
        self.scratch = [self.x, self.h, self.o, self.qkv, self.attn, self.act, self.logits, self.sampled,
                        self.partial, self.attn_part, self.seen, self.top_ids, self.top_vals]
        self.moe = MoeScratch(backend, c, T) if c.ffn_kind == "moe" else None
        self.scratch += self.moe.buffers if self.moe else []
        self.hybrid = HybridScratch(backend, c, T) if c.has_recurrent_state or c.attn_output_gate else None
        self.scratch += self.hybrid.buffers if self.hybrid else []
        self._k: dict[str, object] = {}
        self._matrices: dict[tuple[DeviceMatrix, ...], Matrices] = {}
        self._glu_args: dict[tuple[DeviceMatrix, DeviceMatrix], tuple] = {}
        self._layer_args_kv: GpuKVCache | None = None     # the cache _layer_args were made for
        self._layer_args: list[LayerArgs | None] = []
        self._norm_args = (np.float32(c.norm_eps), np.int32(c.n_embd))
        self._norm_threads = add_norm_threads(c.n_embd)
        self.launches = 0                 # kernels launched by the last enqueue_body
        self._logits_host: PinnedHostBuffer | None = None
        self._logits_ready = backend.create_event()
        self._split_buf: DeviceBuffer | None = None        # halo_split_f16's output (_split_f16)
        types = {m.ggml_type for m in layer_matrices(weights.layers)} | {weights.output.ggml_type}
        types |= {e.ggml_type for L in weights.layers if getattr(L, "moe", None) for e in (L.moe.gate, L.moe.up,
                                                                                         L.moe.down)}
        if self.use_tc and tch_possible(types):
            self._grow_split(split_f16_scratch(c, max_tokens))

    # kernels -----------------------------------------------------------------------------------------
    def kern(self, file: str, name: str):
        kernel = self._k.get(name)               # one lookup: every launch comes through here
        if kernel is None:
            kernel = self._k[name] = self.backend.kernel(file, name)
        return kernel

    def warm_up(self, progress=None) -> None:
        """Compile/load every kernel now (before any graph capture: module loads are not capturable).
        progress(fraction, message), the load's callback, hears of each kernel file before it loads: a file not in
        the kernel cache compiles here (CUDA's nvrtc took 80 s for all of them on an H100 with an empty cache, run 16),
        so a first open says what it waits for instead of sitting at a full bar; the callback may raise to cancel."""
        loading: set[str] = set()

        def kern(file: str, name: str) -> None:
            if progress is not None and file not in loading:
                loading.add(file)
                progress(1.0, f"preparing GPU kernels ({file}): compiled on the first open after an install or a "
                              "driver update, which can take a minute or more")
            self.kern(file, name)

        kq = tuple(f"kq_t{n}" for n in KQ_TOKENS) + tuple(f"bq_t{n}" for n in BQ_TOKENS) + \
            tuple(f"mv_t{n}" for n in MV_TOKENS)
        tensor_core = TC_KERNELS + tuple(f"tn_t{n}" for n in TN_TOKENS) if self.use_tc else ()
        for suffix in ("r1_t1", "r1_t4", "r4_t8", "kq_t1", *kq, "gt") + tensor_core + (("wm",) if self.use_wmma else ()):
            kern("halo_quant.cu", "halo_matmul_" + suffix)
            kern("halo_quant.cu", "halo_glu_" + suffix)
        for name in ("halo_embed_norm", "halo_splitk_sum") + (("halo_split_f16",) if self.use_tc else ()):
            kern("halo_quant.cu", name)
        c = self.config
        for f16 in (False, True):                  # either cache type may be asked for (new_kv_cache)
            layer = ("halo_rope_kv", "halo_attention") + (("halo_attention_tc",) if self.flash else ())
            for name in layer:
                kern("halo_layer.cu", name + kv_suffix(f16))
            if self.flash and not f16 and FA_SPLIT:
                for name in ("halo_kv_split", "halo_attention_tc_split"):
                    kern("halo_layer.cu", name)
            if self.ts:
                kern("halo_layer.cu", ts_kernel(c.head_dim, f16))
            if split_kv_usable(c):
                kern("halo_layer.cu", split_kernel(c.head_dim, c.n_head // c.n_head_kv, f16, self.use_tc)[0])
        for name in ("halo_attention_merge", "halo_add_norm"):
            kern("halo_layer.cu", name)
        kern("halo_sample.cu", "halo_sample")
        if self.hybrid:
            for name in HYBRID_KERNELS:
                kern("halo_delta_net.cu", name)
        if self.moe:
            for name in MOE_KERNELS + (MOE_TC_KERNELS if self.use_tc else ()):
                kern("halo_quant.cu", name)

    def _launch(self, file, name, grid, block, args, shared=0):
        self.backend.launch(self.kern(file, name), grid, block, args, self.stream, shared)
        self.launches += 1

    def _grow_split(self, floats: int) -> None:
        if self._split_buf is not None:
            self.backend.synchronize()
            self.backend.free(self._split_buf)
            self.scratch = [x for x in self.scratch if x is not self._split_buf]
        self._split_buf = self.backend.alloc(floats, np.float32)
        self.scratch.append(self._split_buf)

    def _split_f16(self, X, xrow, T: int, K: int) -> tuple:
        """X's rows (through xrow) split by halo_split_f16 for the tch tiles: (Xh, Xl, sums, exponents, sum-plane
        stride). Once per product: every input of a layer feeds one product (q|k|v and gate|up are fused), so this
        is once per distinct input, and nothing can go stale between products. The scratch (split_f16_scratch) is
        allocated with the forward's where tch can be chosen (tch_possible, tensor cores), else on first use (tests
        that force the tile); a larger request (only tests that swap the config make one) grows it after the stream
        drains."""
        ls = split_sum_stride(T)
        need = split_f16_floats(T, K)
        if self._split_buf is None or self._split_buf.shape[0] < need:
            self._grow_split(max(split_f16_scratch(self.config, self.max_tokens), need))
        b = self._split_buf
        parts = (view(b, 0, T * K, np.uint16), view(b, T * K // 2, T * K, np.uint16),
                 view(b, T * K, (K // 32) * ls), view(b, T * K + (K // 32) * ls, T, np.int32), np.int32(ls))
        self._launch("halo_quant.cu", "halo_split_f16", T, 256,
                     (X, pointer_or_null(xrow), np.int32(K), np.int32(T)) + parts[4:] + parts[:4])
        return parts

    def _tile(self, T: int, rows_all_div4: bool, tile_ok: bool = False, bq_ok: bool = False,
              tn_ok: bool = False) -> tuple[int, int, str]:
        """(rows per warp or block, tokens per tile, kernel suffix). tn_t8 / tn_t16: TN_ROWS rows per warp on
        tensor cores for TN_MIN_T..16 tokens (Q4_K / Q6_K, rows % TN_ROWS, CUDA sm_80+); mv_t1: MV_R rows per
        warp, K split over warps (Q4_K / Q6_K); kq_t1: warp per row, wide K-quant loads (any type); bq_t16:
        BQ_ROWS rows per block for 9..16 tokens, activations staged in shared memory (Q4_K / Q6_K); kq_tN
        (HALO_GPU_KQ_BATCH=1): warp per row for 2..16 tokens, each weight decoded once; tc / gt / wm: 32 x 64
        shared-memory tile per block (128 threads; tc GLU 256), tensor cores / FMAs / RDNA WMMA
        (HALO_GPU_TILES=wmma). _matmul / _glu run "tc" as the pipelined tch / tck / tcp tiles for products of >=
        PIPELINED_MIN_WEIGHTS where their contract holds (_tc_tile, _glu_tile; 64 rows per matmul block)."""
        if TN_MIN_T <= T <= TN_TOKENS[-1] and tn_ok and bq_ok and self.use_tc and not LEGACY_TILES:
            n = next(n for n in TN_TOKENS if n >= T)
            return TN_ROWS, n, f"tn_t{n}"
        if T <= min(MV_MAX_T, MV_TOKENS[-1]) and rows_all_div4 and bq_ok and not LEGACY_TILES:
            n = next(n for n in MV_TOKENS if n >= T)
            return MV_R, n, f"mv_t{n}"
        if T == 1:
            return (1, 1, "r1_t1") if LEGACY_TILES else (1, 1, "kq_t1")
        if BQ_MIN_T <= T <= BQ_TOKENS[-1] and bq_ok and BQ_BATCH and not LEGACY_TILES:
            n = next(n for n in BQ_TOKENS if n >= T)
            return BQ_ROWS, n, f"bq_t{n}"
        if T <= KQ_TOKENS[-1] and KQ_BATCH and not LEGACY_TILES:
            n = next(n for n in KQ_TOKENS if n >= T)
            return 1, n, f"kq_t{n}"
        if T >= GT_MIN_T and tile_ok and not LEGACY_TILES:
            if self.use_tc and not SIMT_TILES:
                return TC_ROWS, TC_TOKENS, "tc"
            return GT_ROWS, GT_TOKENS, "wm" if self.use_wmma else "gt"      # wm: gt's grid, block and contract
        if T <= 4 or not rows_all_div4:
            return 1, 4, "r1_t4"
        return 4, 8, "r4_t8"

    def _splits(self, rows: int, T: int, K: int, planes: int, tile_rows: int = TC_ROWS,
                tile_tokens: int = TC_TOKENS) -> int:
        if rows * K * T * planes < SPLIT_MIN_MACS:
            return 1
        return split_k((rows // tile_rows) * -(-T // tile_tokens), K, planes * T * rows, self.partial_cap)

    def matrices(self, mats) -> Matrices:
        key = tuple(mats)
        facts = self._matrices.get(key)
        if facts is None:
            facts = self._matrices[key] = Matrices.of(key)
        return facts

    def _matmul(self, mats: list[DeviceMatrix], X: DeviceBuffer, T: int, Y: DeviceBuffer, ldy: int,
                bias=None, xrow=None, prefetch: bool = True) -> None:
        """Y = X W^T (+ bias) over the stacked matrices. prefetch False: a single-token launch (mv_t1) behind one that
        fills every slot skips its rows' L2 prefetch before the wait (halo_quant.cu's decode matvec notes)."""
        m = self.matrices(mats)
        rows, K = m.rows, m.K
        R, NT, suffix = self._tile(T, m.rows_div4, m.tile_ok, m.bq_ok, m.tn_ok)
        args = m.segments + (pointer_or_null(bias), X, pointer_or_null(xrow), m.K32, np.int32(T), Y, np.int32(ldy))
        if suffix[:2] == "mv":
            kw, R = mv_matmul_shape(rows, K, self.multiprocessors)
            self._launch("halo_quant.cu", MV_MATMUL_KERNELS[R], (mv_blocks(rows, R, kw), -(-T // NT)),
                         32 * MV_WARPS, args + (np.int32(kw), np.int32(prefetch)))
            return
        if suffix[:2] == "tn":
            block_rows = TN_ROWS * TN_WARPS
            splits = k_slices(-(-rows // block_rows) * -(-T // NT), K // 256, T * rows, self.partial_cap,
                              TN_TARGET_BLOCKS, 2)
            self._launch("halo_quant.cu", "halo_matmul_" + suffix, (-(-rows // block_rows), -(-T // NT), splits),
                         32 * TN_WARPS, args + (np.int32(-(-(K // 256) // splits)), self.partial))
            if splits > 1:
                self._splitk_sum(splits, T, rows, bias, -1, Y, ldy)
            return
        if suffix[:2] == "bq":
            splits = k_slices(-(-rows // R) * -(-T // NT), K // 256, T * rows, self.partial_cap)
            ksb = -(-(K // 256) // splits)
            self._launch("halo_quant.cu", "halo_matmul_" + suffix, (-(-rows // R), -(-T // NT), splits),
                         32 * MATMUL_WARPS, args + (np.int32(ksb), self.partial))
            if splits > 1:
                self._splitk_sum(splits, T, rows, bias, -1, Y, ldy)
            return
        if suffix == "tc":
            tile = _tc_tile(m.types, rows * K)
            if tile != "tc" and m.tcp_ok:
                suffix, R = tile, TCP_ROWS
            threads = 128
            if suffix == "tch":
                suffix, NT = _tch_build(T)
                threads = 2 * NT
                xh, xl, xs, xe, ls = self._split_f16(X, xrow, T, K)
                args = m.segments + (pointer_or_null(bias), xh, xl, xs, xe, m.K32, np.int32(T), ls, Y, np.int32(ldy))
            splits = self._splits(rows, T, K, 1, R, NT)
            self._launch("halo_quant.cu", "halo_matmul_" + suffix, (rows // R, -(-T // NT), splits), threads,
                         args + (np.int32(K // splits), self.partial))
            if splits > 1:
                self._splitk_sum(splits, T, rows, bias, -1, Y, ldy)
            return
        grid = (-(-rows // (MATMUL_WARPS * R)), -(-T // NT)) if suffix[:2] not in ("gt", "wm", "bq") else \
            (-(-rows // R), -(-T // NT))
        self._launch("halo_quant.cu", "halo_matmul_" + suffix, grid, 32 * MATMUL_WARPS, args)

    def _glu(self, gate: DeviceMatrix, up: DeviceMatrix, X, T: int, A) -> None:
        c = self.config
        m = self.matrices((gate, up))               # gate and up: n_ff rows each, so their facts are each one's
        R, NT, suffix = self._tile(T, m.rows_div4, m.tile_ok, m.bq_ok, m.tn_ok)
        act = 0 if c.activation == "silu" else 1
        weights = self._glu_args.get((gate, up))
        if weights is None:
            weights = self._glu_args[gate, up] = (gate.buf, np.int32(gate.ggml_type), up.buf, np.int32(up.ggml_type),
                                                  np.int32(gate.row_bytes), np.int32(up.row_bytes), np.int32(c.n_ff),
                                                  np.int32(act))
        args = weights + (X, m.K32, np.int32(T), A)
        if suffix[:2] == "mv":
            kw = mv_split_warps(c.n_embd)
            self._launch("halo_quant.cu", "halo_glu_" + suffix, (mv_blocks(c.n_ff, R, kw), -(-T // NT)),
                         32 * MV_WARPS, args + (np.int32(kw),))
            return
        if suffix[:2] == "tn":
            block_rows = TN_ROWS * TN_WARPS
            splits = k_slices(-(-c.n_ff // block_rows) * -(-T // NT), c.n_embd // 256, 2 * T * c.n_ff,
                              self.partial_cap, TN_TARGET_BLOCKS, 2)
            self._launch("halo_quant.cu", "halo_glu_" + suffix, (-(-c.n_ff // block_rows), -(-T // NT), splits),
                         32 * TN_WARPS, args + (np.int32(-(-(c.n_embd // 256) // splits)), self.partial))
            if splits > 1:
                self._splitk_sum(splits, T, c.n_ff, None, act, A, c.n_ff)
            return
        if suffix == "tc":
            tile = _glu_tile(m.types, c.n_ff * c.n_embd)   # every GLU tile: 32 rows of each
            name, threads = "halo_glu_" + tile, 128 if tile != "tc" else 256
            if tile == "tch":
                suffix, NT = _tch_build(T)
                name, threads = "halo_glu_" + suffix, 2 * NT
                xh, xl, xs, xe, ls = self._split_f16(X, None, T, c.n_embd)
                args = weights + (xh, xl, xs, xe, m.K32, np.int32(T), ls, A)
            splits = self._splits(c.n_ff, T, c.n_embd, 2, TC_ROWS, NT)
            self._launch("halo_quant.cu", name, (c.n_ff // R, -(-T // NT), splits), threads,
                         args + (np.int32(c.n_embd // splits), self.partial))
            if splits > 1:
                self._splitk_sum(splits, T, c.n_ff, None, act, A, c.n_ff)
            return
        grid = (-(-c.n_ff // (MATMUL_WARPS * R)), -(-T // NT)) if suffix[:2] not in ("gt", "wm", "bq") else \
            (-(-c.n_ff // R), -(-T // NT))
        self._launch("halo_quant.cu", "halo_glu_" + suffix, grid, 32 * MATMUL_WARPS, args)

    def _splitk_sum(self, splits: int, T: int, rows: int, bias, act: int, Y, ldy: int) -> None:
        self._launch("halo_quant.cu", "halo_splitk_sum", -(-T * rows // 256), 256,
                     (self.partial, np.int32(splits), np.int32(T), np.int32(rows), pointer_or_null(bias),
                      np.int32(act), Y, np.int32(ldy)))

    def _add_norm(self, T: int, o, post_w, next_w) -> None:
        self._launch("halo_layer.cu", "halo_add_norm", T, self._norm_threads,
                     (self.x, pointer_or_null(o), pointer_or_null(post_w), next_w) + self._norm_args + (self.h,))

    def layer_args(self, kv: GpuKVCache) -> list[LayerArgs | None]:
        """Per layer, the arguments of its launches that stay the same from step to step with `kv` (None for
        linear-attention layers): made on the first step with this cache, kept while it is the one stepped."""
        if self._layer_args_kv is not kv:
            self._layer_args = [None if isinstance(L, DeviceLinearLayer) else self._make_layer_args(kv, i, L)
                                for i, L in enumerate(self.w.layers)]
            self._layer_args_kv = kv
        return self._layer_args

    def window(self, i: int) -> int:
        """Layer i's attention window in keys (a query sees its last `window` positions), 0 for full attention."""
        c = self.config
        return c.sliding_window if c.sliding_layers[i] else 0

    def _make_layer_args(self, kv: GpuKVCache, i: int, L) -> LayerArgs:
        c = self.config
        half = c.rope_dim // 2
        rope_scale = np.float64(rope_attention_factor(c))         # YaRN's cos/sin factor, else 1 (as the CPU)
        rope = (self.qkv, np.int32(self.qkv_width), kv.positions, kv.slots, pointer_or_null(L.q_norm),
                pointer_or_null(L.k_norm),
                np.float32(c.norm_eps), np.int32(c.n_head), np.int32(c.n_head_kv), np.int32(c.head_dim),
                np.int32(c.rope_dim), np.int32(c.rope_style == "neox"), view(self.w.rope_inv_freq, i * half, half),
                rope_scale, kv.k[i], kv.v[i])
        window = self.window(i)
        attention = (self.qkv, np.int32(self.qkv_width), kv.k[i], kv.v[i], kv.positions, kv.token_seq,
                     kv.block_tables, np.int32(kv.num_blocks), np.int32(kv.block_size), np.int32(c.n_head),
                     np.int32(c.n_head_kv), np.int32(c.head_dim), np.float32(c.attn_scale), np.int32(window))
        return LayerArgs(rope, attention)

    def _attention(self, kv: GpuKVCache, i: int, T: int, sinks=None, split_S: int = 0) -> None:
        """self.attn [T, q_dim] from self.qkv's q heads and layer i's cache: split-KV for decode batches, the
        tensor-core tile for prefill steps where usable (a float32 cache's on the step's split copy of its split_S
        sequences where the step takes one, _split_step), else the SIMT tile where usable and a query of this layer
        sees ts_min_context keys (kv.context, set by the step's upload, capped by the layer's window; a decode graph
        of more than SKV_MAX_T sequences keeps the choice it was captured with, both kernels being exact), else
        halo_attention (see SKV_*, FA_*, TS_*, ATTN_WARPS);
        `sinks` [n_head] float32 attention-sink logits (gpt-oss) or None."""
        c = self.config
        H, Hkv, D = c.n_head, c.n_head_kv, c.head_dim
        common = self.layer_args(kv)[i].attention
        if self.split_kv and T <= SKV_MAX_T:
            nc = skv_chunks(T)
            self._launch("halo_layer.cu", split_kernel(D, H // Hkv, kv.f16, self.use_tc)[0], (T, Hkv, nc),
                         32 * SKV_WARPS,
                         common + (self.attn_part, self.attn_count if SKV_FUSED else NULL_POINTER,
                                   pointer_or_null(sinks), self.attn),
                         shared=split_shared_bytes(D, H // Hkv, kv.f16, self.use_tc))
            if not SKV_FUSED:
                self._launch("halo_layer.cu", "halo_attention_merge", (T, H), merge_threads(D, nc),
                             (self.attn_part, np.int32(nc), np.int32(H), np.int32(D), pointer_or_null(sinks),
                              self.attn))
            return
        if self.flash and T > SKV_MAX_T:
            rows = fa_block_rows(T, H // Hkv, Hkv, self.multiprocessors)
            rows_tokens = rows // (H // Hkv)                   # tokens per block: x the group's heads = rows
            grid = (-(-T // rows_tokens), Hkv)
            if split_S:
                self._launch("halo_layer.cu", "halo_kv_split", (-(-kv.context // FA_KEYS), split_S, Hkv), 128,
                             (kv.k[i], kv.v[i], kv.seq_lens, kv.block_tables, np.int32(kv.num_blocks),
                              np.int32(kv.block_size), np.int32(Hkv), np.int32(D), kv.split_k, kv.split_v,
                              kv.split_scales))
                self._launch("halo_layer.cu", "halo_attention_tc_split", grid, 2 * rows,
                             common[:2] + (kv.split_k, kv.split_v) + common[4:]
                             + (np.int32(T), pointer_or_null(sinks), self.attn, kv.split_scales),
                             shared=FA_SPLIT_SHARED_BYTES)
                return
            self._launch("halo_layer.cu", "halo_attention_tc" + kv_suffix(kv.f16), grid, 2 * rows,
                         common + (np.int32(T), pointer_or_null(sinks), self.attn))
            return
        keys = min(kv.context, self.window(i) or kv.context)    # the most keys one query of this layer sees
        if self.ts and T > SKV_MAX_T and keys >= self.ts_min_context:
            rows_tokens = TS_ROWS[ts_class(D)] // (H // Hkv)
            self._launch("halo_layer.cu", ts_kernel(D, kv.f16), (-(-T // rows_tokens), Hkv), 128,
                         common + (np.int32(T), pointer_or_null(sinks), self.attn))
            return
        self._launch("halo_layer.cu", "halo_attention" + kv_suffix(kv.f16), (T, H), 32 * ATTN_WARPS,
                     common + (pointer_or_null(sinks), self.attn),
                     shared=4 * ATTN_WARPS * (D + 2))

    # the step body: everything after the metadata upload; graph-capturable ---------------------------
    def _split_step(self, kv: GpuKVCache, T: int, S: int) -> bool:
        """Whether this step's tiled attention splits its keys once (halo_kv_split), decided once a step: the tile
        runs (more than SKV_MAX_T tokens) on a float32 cache with its split copy, more tokens than sequences (a decode
        graph's grid could not follow the depth), blocks the factors' index takes (KV_SPLIT_SCALE_KEYS slots or more),
        and a step the copy pays for (split_pays over the step's upload, in fa_block_rows' blocks)."""
        if not (FA_SPLIT and self.flash and T > SKV_MAX_T and kv.split is not None and T > S
                and kv.block_size >= KV_SPLIT_SCALE_KEYS):
            return False
        G = self.config.n_head // self.config.n_head_kv
        block_tokens = fa_block_rows(T, G, self.config.n_head_kv, self.multiprocessors) // G
        return split_pays(np.diff(kv.step_starts), kv.step_keys, block_tokens)

    def enqueue_body(self, kv: GpuKVCache, T: int, n_out: int, sample: bool, feed_next: bool,
                     num_seqs: int | None = None) -> None:
        """num_seqs: the step's sequences (default n_out: a graph-captured decode step has one of each)."""
        c, w = self.config, self.w
        S = n_out if num_seqs is None else num_seqs
        self.launches = 0
        E, H, Hkv, D = c.n_embd, c.n_head, c.n_head_kv, c.head_dim
        emb = w.token_embd
        self._launch("halo_quant.cu", "halo_embed_norm", T, 256,
                     (emb.buf, np.int32(emb.ggml_type), np.int32(emb.row_bytes), kv.ids, np.int32(E),
                      np.float32(c.embed_scale), w.layers[0].attn_norm, np.float32(c.norm_eps), self.x, self.h,
                      kv.slots, kv.token_at_slot))
        layer_args = self.layer_args(kv)
        split_S = S if self._split_step(kv, T, S) else 0
        for i, L in enumerate(w.layers):
            if isinstance(L, DeviceLinearLayer):
                enqueue_linear_attention(self, L, kv, T, S, i)
                self._ffn(L, T, i)
                continue
            if c.attn_output_gate:
                enqueue_gated_qkv(self, L, T)
            else:
                self._matmul([L.wq, L.wk, L.wv], self.h, T, self.qkv, self.qkv_width, bias=L.bqkv)
            self._launch("halo_layer.cu", "halo_rope_kv" + kv_suffix(kv.f16), (T, H + Hkv), max(32, -(-D // 32) * 32),
                         layer_args[i].rope)
            self._attention(kv, i, T, L.sinks, split_S)
            if c.attn_output_gate:
                enqueue_output_gate(self, T)
            self._matmul([L.wo], self.attn, T, self.o, E, bias=L.bo)
            self._ffn(L, T, i)
        self._matmul([w.output], self.h, n_out, self.logits, c.vocab_size, xrow=kv.logits_idx)
        if sample:
            self._launch("halo_sample.cu", "halo_sample", n_out, 1024,
                         (self.logits, np.int32(c.vocab_size), kv.samp_i, kv.samp_f, self.sampled,
                          kv.ids if feed_next else NULL_POINTER, kv.logits_idx, kv.token_seq, kv.seq_lens,
                          kv.block_tables, np.int32(kv.num_blocks), np.int32(kv.block_size), kv.token_at_slot,
                          self.seen, self.top_ids, self.top_vals, np.int32(TOP_LOGITS_MAX)))

    def _ffn(self, L, T: int, i: int) -> None:
        """self.o (the mixer's output) -> residual, FFN norm, FFN, residual, the next layer's input norm."""
        w, E = self.w, self.config.n_embd
        self._add_norm(T, self.o, L.post_attn_norm, L.ffn_norm)
        if L.moe is not None:
            enqueue_moe_ffn(self, L.moe, self.moe, T, self.h, self.o)
        else:
            self._glu(L.w_gate, L.w_up, self.h, T, self.act)
            self._matmul([L.w_down], self.act, T, self.o, E, prefetch=False)    # behind the GLU
        nxt = w.layers[i + 1].attn_norm if i + 1 < len(w.layers) else w.output_norm
        self._add_norm(T, self.o, L.post_ffn_norm, nxt)

    # entry points ------------------------------------------------------------------------------------
    def enqueue(self, step: StepInput, kv: GpuKVCache, sampling: list[SamplingRow] | None = None,
                sample: bool = True, ids_on_device: bool = False, feed_next: bool = False) -> None:
        kv.upload(step, sampling, self.stream, ids_on_device)
        self.enqueue_body(kv, step.num_tokens, len(step.logits_indices), sample, feed_next, step.num_seqs)

    def forward(self, step: StepInput, kv: GpuKVCache) -> np.ndarray:
        """CpuModel.forward's contract: logits [len(logits_indices), vocab] float32 (blocks the host)."""
        self.enqueue(step, kv, sample=False)
        return self.read_logits(len(step.logits_indices))

    def read_logits(self, n: int) -> np.ndarray:
        c = self.config
        if self._logits_host is None:
            self._logits_host = self.backend.alloc_pinned((self.max_seqs, c.vocab_size), np.float32)
        self.backend.copy_d2h_async(self._logits_host, self.logits, self.stream, nbytes=n * c.vocab_size * 4)
        self._logits_ready.record(self.stream)
        self._logits_ready.synchronize()
        return self._logits_host.array[:n].copy()

    def start_readback(self, pool: ReadbackPool, n_out: int) -> AsyncOutput:
        slot = pool.acquire()
        self.backend.copy_d2d_async(slot.device["ids"], view(self.sampled, 0, n_out), self.stream)
        return pool.start(slot, {"ids": n_out}, self.stream)

    def free(self) -> None:
        """Scratch, pinned logits, the event and the stream (given or made in __init__: this object owns it)."""
        self.backend.synchronize()
        for b in self.scratch:
            self.backend.free(b)
        if self._logits_host is not None:
            self.backend.free_pinned(self._logits_host)
        self.backend.destroy_event(self._logits_ready)
        self.backend.destroy_stream(self.stream)
