"""Mixture-of-experts FFN on the GPU (qwen3moe, gpt-oss): router, top-k and the expert products, all on the device.

Per step of T tokens (kernels in halo_quant.cu):
    router logits [T, n_expert] = h @ W_router.T (+ b)     (the ordinary matmul; W_router is F32 in GGUF)
    halo_moe_route: ids [T, k], weights [T, k]             (top k, softmax over them: engine.model.moe.route)
    halo_moe_glu:   A [T*k, F] = glu(gate_e h + bg_e, up_e h + bu_e)   one warp per (expert row, token-slot pair);
                    glu: SwiGLU, or gpt-oss's clamped variant (engine.model.moe.swiglu_oai)
    halo_moe_down:  o [T, E] = sum_j w_j (down_e(A_j) + bd_e)          the weighted sum in the same pass
(a decode step of Q4_K / Q6_K experts takes halo_moe_glu_mv_t1 / halo_moe_down_mv_t1: the same products on the
dense decode matvecs' scheme, several rows per warp with their loads in flight together)
The expert ids never leave the device, so decode stays graph-capturable: it reads exactly the k routed
experts. Prefill (T > 1) groups the (token, slot) pairs by expert first (halo_moe_sort, a counting sort on
the device), so each expert row is decoded once per 8 of its tokens: halo_moe_glu_grouped, then
halo_moe_down_grouped into per-pair rows D [T*k, E], then halo_moe_combine sums each token's k rows in slot
order (deterministic). On tensor cores (CUDA sm_80+, Q4_K / Q6_K experts) the sort also cuts each expert's pairs
into tiles of 8 or 16, and halo_moe_glu_tn_tN / halo_moe_down_tn_tN run a block per (128 rows, tile) on the tn
kernels' k loop; elsewhere (HIP) halo_moe_*_bq_tN do the same on the batched-decode bq kernels' scheme (a block per
16 rows and tile). Steps wide enough to average 32 pairs an expert take tiles of 32 or 64 on tch's f16 tile
(halo_moe_*_th_tN): halo_moe_tile_rows lists each tile's tokens and pairs, a block runs tch's k loop over 64 rows of
the tile's expert, the GLU reading X's split through the token list and the down product A's rows gathered in tile
order by their split. Experts of other types (gpt-oss's MXFP4, a Q8_0 or Q4_0 file's) take tiles of 64 on the dense
prefill tiles' k loops, which read any type: halo_moe_*_tp (tcp's, tensor cores) or halo_moe_*_gt (gt's, SIMT: HIP).
Grids are fixed by T and n_expert, never by the routing, so prefill is capturable too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from engine.backends.base import NULL_POINTER, Backend, DeviceBuffer, pointer_or_null
from engine.gguf.types import BLOCK_LAYOUT, GGMLType
from engine.model.config import ModelConfig
from engine.model.moe import OAI_ALPHA, OAI_LIMIT

MOE_PER_LANE = 8            # halo_moe_route: a warp holds up to 32 * 8 router logits
MOE_WARPS = 4
MOE_DOWN_WARPS = 8          # halo_moe_down_mv_t1's block: a warp per routed expert, at most (more: some take two)
# Steps of several tokens in tiles (halo_moe_*_tn_tN on tensor cores, halo_moe_*_bq_tN on the SIMT path): tiles of 8
# or 16 of an expert's pairs; 16 once the step averages that many pairs an expert (a tile's weights are read once
# for all its pairs)
MOE_TILES = (8, 16)
# ... and of 32 or 64 on tch's f16 tile (halo_moe_*_th_tN, CUDA sm_80+), once the step averages that many
MOE_TH_TILES = (32, 64)
# ... and of MOE_WIDE_NT for experts of any type on the dense prefill tiles' k loops (halo_moe_*_tp on tensor cores,
# halo_moe_*_gt elsewhere): the experts the tiles above do not take (MXFP4, Q8_0, Q4_0 ...)
MOE_WIDE_NT = 64
# ... taken by default where a step averages this many pairs an expert. gpt-oss-20b shapes (32 experts, 4 routed) on
# an H100, tp against the grouped kernels: 2,048 / 512 / 128 tokens 4,126 / 3,007 / 1,255 against 1,081 / 1,038 / 896
# tok/s (averages 256 / 64 / 16 pairs), but 64 tokens (8) 685 against 756 and 16 tokens 213 against 360
MOE_WIDE_MIN = 16
# Every kernel this module launches (GpuForward compiles them with the model; the tensor-core ones where it has them)
MOE_KERNELS = ("halo_moe_route", "halo_moe_glu", "halo_moe_down", "halo_moe_glu_mv_t1", "halo_moe_down_mv_t1",
               "halo_moe_sort", "halo_moe_glu_grouped", "halo_moe_down_grouped", "halo_moe_combine",
               "halo_moe_glu_gt", "halo_moe_down_gt") + tuple(
    f"halo_moe_{p}_bq_t{n}" for n in MOE_TILES for p in ("glu", "down"))
MOE_TC_KERNELS = tuple(f"halo_moe_{p}_tn_t{n}" for n in MOE_TILES for p in ("glu", "down")) + tuple(
    f"halo_moe_{p}_th_t{n}" for n in MOE_TH_TILES for p in ("glu", "down")) + (
    "halo_moe_tile_rows", "halo_moe_glu_tp", "halo_moe_down_tp")
# halo_moe_glu*'s `act` per (dense activation, expert activation): 0 SwiGLU, 2 gpt-oss's clamped SwiGLU (its
# alpha and limit are engine.model.moe's, passed at launch)
EXPERT_ACT = {"swiglu": 0, "swiglu_oai": 2}


@dataclass(frozen=True)
class DeviceExperts:
    """Stacked experts as in the file: expert e's [rows, cols] matrix is rows e*rows.. of `buf`."""
    buf: DeviceBuffer
    ggml_type: int
    n_expert: int
    rows: int
    cols: int

    @property
    def row_bytes(self) -> int:
        elems, nbytes = BLOCK_LAYOUT[GGMLType(self.ggml_type)]
        return self.cols // elems * nbytes


@dataclass(frozen=True)
class DeviceMoe:
    router: object              # DeviceMatrix [n_expert, E]
    gate: DeviceExperts         # per expert [F, E]
    up: DeviceExperts
    down: DeviceExperts         # per expert [E, F]
    router_bias: DeviceBuffer | None = None     # [n_expert] float32 (gpt-oss; None: no biases)
    gate_bias: DeviceBuffer | None = None       # [n_expert, F]
    up_bias: DeviceBuffer | None = None         # [n_expert, F]
    down_bias: DeviceBuffer | None = None       # [n_expert, E]


def gpu_moe_refusal(c: ModelConfig) -> str | None:
    """Why the GPU path cannot run this model's MoE FFN (None: it can)."""
    if c.ffn_kind != "moe":
        return None
    if c.expert_activation not in EXPERT_ACT:
        return f"{c.arch}: the GPU path has no kernel for the {c.expert_activation} expert activation"
    if c.n_expert > 32 * MOE_PER_LANE or c.n_expert_used > 32:
        return f"{c.arch}: {c.n_expert} experts ({c.n_expert_used} used) exceed the GPU router's 256 (32)"
    return None


class MoeScratch:
    """Per-step buffers of the MoE FFN for up to `max_tokens` tokens."""

    def __init__(self, backend: Backend, c: ModelConfig, max_tokens: int):
        T, k = max_tokens, c.n_expert_used
        self.logits = backend.alloc((T, c.n_expert), np.float32)
        self.ids = backend.alloc((T, k), np.int32)
        self.weights = backend.alloc((T, k), np.float32)
        self.act = backend.alloc((T * k, c.n_ff_exp), np.float32)
        self.down = backend.alloc((T * k, c.n_embd), np.float32)        # per-pair expert outputs (prefill)
        self.offsets = backend.alloc(c.n_expert + 1, np.int32)
        self.order = backend.alloc(T * k, np.int32)
        self.order_tok = backend.alloc(T * k, np.int32)
        self.tiles = backend.alloc(2 * max_tiles(T * k, c.n_expert, MOE_TILES[0]), np.int32)
        self.tile_tok = backend.alloc(th_rows(T * k), np.int32)          # halo_moe_tile_rows' lists (th tiles)
        self.tile_pair = backend.alloc(th_rows(T * k), np.int32)
        self.buffers = [self.logits, self.ids, self.weights, self.act, self.down, self.offsets, self.order,
                        self.order_tok, self.tiles, self.tile_tok, self.tile_pair]

    @staticmethod
    def nbytes(c: ModelConfig, max_tokens: int) -> int:
        """For the pre-flight: logits, ids, weights, the experts' hidden activations and the sort's lists."""
        k = c.n_expert_used
        per_token = c.n_expert + 2 * k + k * c.n_ff_exp + k * c.n_embd + 2 * k
        tiles = 2 * max_tiles(max_tokens * k, c.n_expert, MOE_TILES[0]) + 2 * th_rows(max_tokens * k)
        return 4 * (max_tokens * per_token + c.n_expert + 1 + tiles) if c.ffn_kind == "moe" else 0


def max_tiles(pairs: int, n_expert: int, nt: int) -> int:
    """The most tiles of nt pairs that `pairs` routed pairs can make: every expert may leave one tile part full."""
    return -(-pairs // nt) + n_expert


def tile_size(sizes: tuple, pairs: int, n_expert: int) -> int:
    """The widest of `sizes` that a step of `pairs` routed pairs averages per expert (else the narrowest)."""
    return max((nt for nt in sizes if pairs >= nt * n_expert), default=sizes[0])


def wide_tile_rows(kind: str) -> tuple[int, int]:
    """Expert rows a block of halo_moe_glu_{kind} / halo_moe_down_{kind} takes ("tp": tcp's 32 gate + 32 up rows, 64
    down rows; "gt": gt's 32)."""
    from engine.gpu.forward import GT_ROWS, TCP_ROWS  # deferred: engine.gpu.forward imports this module
    return (TCP_ROWS // 2, TCP_ROWS) if kind == "tp" else (GT_ROWS, GT_ROWS)


def th_rows(pairs: int) -> int:
    """Rows of the th tiles' gathered inputs (max_tiles x nt) for any step of up to `pairs` pairs: a tile of nt
    runs only where the step averages nt pairs an expert (pairs >= nt n_expert), so it is at most
    pairs + nt + nt n_expert <= 2 pairs + nt."""
    return 2 * pairs + MOE_TH_TILES[-1]


def th_split_floats(c: ModelConfig, max_tokens: int) -> int:
    """halo_split_f16's scratch (forward.split_f16_floats) for the th tiles' down-product input: th_rows rows of
    n_ff_exp, gathered in tile order (the GLU reads X's split of the step's tokens, a dense product's); 0 for a model
    without MoE."""
    if c.ffn_kind != "moe":
        return 0
    from engine.gpu.forward import split_f16_floats  # deferred: engine.gpu.forward imports this module
    return split_f16_floats(th_rows(max_tokens * c.n_expert_used), c.n_ff_exp)


def enqueue_moe_ffn(fwd, moe: DeviceMoe, s: MoeScratch, T: int, X: DeviceBuffer, Y: DeviceBuffer) -> None:
    """Y [T, E] = the MoE FFN of X [T, E] (after the pre-FFN norm), on fwd's stream; 4 launches."""
    c = fwd.config
    k, F, E = c.n_expert_used, c.n_ff_exp, c.n_embd
    fwd._matmul([moe.router], X, T, s.logits, c.n_expert, bias=moe.router_bias)
    fwd._launch("halo_quant.cu", "halo_moe_route", T, 32,
                (s.logits, np.int32(c.n_expert), np.int32(k), s.ids, s.weights))
    act = EXPERT_ACT[c.expert_activation]
    g, u, d = moe.gate, moe.up, moe.down
    glu_tail = (pointer_or_null(moe.gate_bias), pointer_or_null(moe.up_bias), OAI_ALPHA, OAI_LIMIT)
    if T > 1:
        _grouped(fwd, moe, s, T, X, Y, act, glu_tail)
        return
    if _decode_mv(fwd, moe, T):
        # deferred: engine.gpu.forward imports this module; the dense matvecs' block shape is its fact
        from engine.gpu.forward import MV_R, MV_WARPS, mv_blocks, mv_split_warps
        kw = mv_split_warps(E)
        fwd._launch("halo_quant.cu", "halo_moe_glu_mv_t1", (mv_blocks(F, MV_R, kw), T * k), 32 * MV_WARPS,
                    (g.buf, np.int32(g.ggml_type), u.buf, np.int32(u.ggml_type), np.int32(g.row_bytes),
                     np.int32(u.row_bytes), np.int32(F), np.int32(act), X, np.int32(E), s.ids, np.int32(k))
                    + glu_tail + (s.act, np.int32(kw)))
        fwd._launch("halo_quant.cu", "halo_moe_down_mv_t1", (E // MV_R, T), 32 * min(k, MOE_DOWN_WARPS),
                    (d.buf, np.int32(d.ggml_type), np.int32(d.row_bytes), np.int32(E), s.act, np.int32(F), s.ids,
                     s.weights, np.int32(k), pointer_or_null(moe.down_bias), Y))
        return
    fwd._launch("halo_quant.cu", "halo_moe_glu", (-(-F // MOE_WARPS), T * k), 32 * MOE_WARPS,
                (g.buf, np.int32(g.ggml_type), u.buf, np.int32(u.ggml_type), np.int32(g.row_bytes),
                 np.int32(u.row_bytes), np.int32(F), np.int32(act), X, np.int32(E), s.ids, np.int32(k))
                + glu_tail + (s.act,))
    fwd._launch("halo_quant.cu", "halo_moe_down", (-(-E // MOE_WARPS), T), 32 * MOE_WARPS,
                (d.buf, np.int32(d.ggml_type), np.int32(d.row_bytes), np.int32(E), s.act, np.int32(F), s.ids,
                 s.weights, np.int32(k), pointer_or_null(moe.down_bias), Y))


def _decode_mv(fwd, moe: DeviceMoe, T: int) -> bool:
    """Whether this step's expert products take halo_moe_*_mv_t1: where a dense product of the same matrices would
    take the decode matvec (fwd's choice of kernel: one token, Q4_K / Q6_K rows, K % 256 == 0, rows % 4 == 0)."""
    return all(fwd._tile(T, m.rows_div4, m.tile_ok, m.bq_ok, m.tn_ok)[2] == "mv_t1" for m in _facts(fwd, moe))


def _prefill_kind(fwd, moe: DeviceMoe, pairs: int) -> str:
    """The expert kernels of a step of several tokens: "th" (tiles of 32 / 64 on tch's f16 tile) where the step
    averages MOE_TH_TILES[0] pairs an expert and the tn contract holds with rows for th's blocks (n_ff % 32,
    n_embd % 64); "tn" (tiles of 8 / 16 on tensor cores) where the GPU has the tn kernels (CUDA sm_80+) and every
    expert matrix meets their contract (Q4_K / Q6_K, K % 256 == 0, rows % 16 == 0); "bq" (tiles on the SIMT path:
    HIP) for Q4_K / Q6_K with K % 256 == 0; for other types tiles of MOE_WIDE_NT on the dense tiles' k loops, "tp"
    (tensor cores) or "gt" (SIMT), where n_embd and n_ff_exp are multiples of 64 and the step averages MOE_WIDE_MIN
    pairs an expert; else "grouped".
    HALO_GPU_MOE_PREFILL names one for comparisons (where it applies: th's scratch, th_rows, holds only steps that
    wide)."""
    # deferred: engine.gpu.forward imports this module
    from engine.gpu.forward import TC_ROWS, TCP_ROWS, tch_possible
    c = fwd.config
    mats = _facts(fwd, moe)
    fits = {"grouped": True, "bq": all(m.bq_ok for m in mats),
            "tn": fwd.use_tc and all(m.bq_ok and m.tn_ok for m in mats)}
    # th also needs the split scratch that GpuForward keeps from the start where tch_possible (its experts' types)
    fits["th"] = (fits["tn"] and tch_possible({moe.gate.ggml_type, moe.up.ggml_type, moe.down.ggml_type})
                  and c.n_ff_exp % TC_ROWS == 0 and c.n_embd % TCP_ROWS == 0
                  and pairs >= MOE_TH_TILES[0] * c.n_expert)
    # tp / gt: any type, K % 64 (gt's k stage, both products), n_ff % 32 (GLU rows), n_embd % 64 (tp's down rows)
    shapes_fit = c.n_embd % 64 == 0 and c.n_ff_exp % 64 == 0
    fits["tp"] = fwd.use_tc and shapes_fit
    fits["gt"] = shapes_fit
    asked = os.environ.get("HALO_GPU_MOE_PREFILL")
    if asked in fits and fits[asked]:
        return asked
    wide = pairs >= MOE_WIDE_MIN * c.n_expert
    return next(kind for kind in ("th", "tn", "bq", "tp", "gt", "grouped")
                if fits[kind] and (wide or kind not in ("tp", "gt")))


def _facts(fwd, moe: DeviceMoe) -> tuple:
    """GpuForward's launch facts (forward.Matrices) of the experts' gate | up and of their down matrices."""
    return fwd.matrices((moe.gate, moe.up)), fwd.matrices((moe.down,))


def _grouped(fwd, moe: DeviceMoe, s: MoeScratch, T: int, X: DeviceBuffer, Y: DeviceBuffer, act: int,
             glu_tail: tuple) -> None:
    c = fwd.config
    k, F, E, n = c.n_expert_used, c.n_ff_exp, c.n_embd, c.n_expert
    g, u, d = moe.gate, moe.up, moe.down
    # deferred: engine.gpu.forward imports this module; the tile kernels' block shapes are its facts
    from engine.gpu.forward import BQ_ROWS, MATMUL_WARPS, TC_ROWS, TCP_ROWS, TN_ROWS, TN_WARPS
    kind = _prefill_kind(fwd, moe, T * k)
    tiled = kind != "grouped"
    sizes = {"th": MOE_TH_TILES, "tp": (MOE_WIDE_NT,), "gt": (MOE_WIDE_NT,)}.get(kind, MOE_TILES)
    nt = tile_size(sizes, T * k, n) if tiled else 0
    tiles = max_tiles(T * k, n, nt) if tiled else 0
    fwd._launch("halo_quant.cu", "halo_moe_sort", 1, 256,
                (s.ids, np.int32(T * k), np.int32(k), np.int32(n), s.offsets, s.order, s.order_tok, np.int32(nt),
                 s.tiles if tiled else NULL_POINTER, np.int32(tiles)))
    glu = (g.buf, np.int32(g.ggml_type), u.buf, np.int32(u.ggml_type), np.int32(g.row_bytes), np.int32(u.row_bytes),
           np.int32(F), np.int32(act), X, np.int32(E), s.offsets, s.order, s.order_tok)
    down = (d.buf, np.int32(d.ggml_type), np.int32(d.row_bytes), np.int32(E), s.act, np.int32(F), s.offsets, s.order)
    if kind == "th":
        # tile y's pairs at rows y nt ..: the GLU reads X's split through their tokens, the down product's input is
        # split in that order
        fwd._launch("halo_quant.cu", "halo_moe_tile_rows", tiles, nt,
                    (s.offsets, s.order, s.order_tok, s.tiles, s.tile_tok, s.tile_pair))
        xh, xl, xs, xe, ls = fwd._split_f16(X, None, T, E)
        fwd._launch("halo_quant.cu", f"halo_moe_glu_th_t{nt}", (F // TC_ROWS, tiles), 2 * nt,
                    glu[:8] + (xh, xl, xs, xe, np.int32(E), ls, s.tile_tok, s.offsets, s.order, s.tiles) + glu_tail
                    + (s.act,))
        xh, xl, xs, xe, ls = fwd._split_f16(s.act, s.tile_pair, tiles * nt, F)
        fwd._launch("halo_quant.cu", f"halo_moe_down_th_t{nt}", (E // TCP_ROWS, tiles), 2 * nt,
                    down[:4] + (xh, xl, xs, xe, np.int32(F), ls, s.offsets, s.order, s.tiles,
                                pointer_or_null(moe.down_bias), s.down))
    elif kind in ("tp", "gt"):
        glu_rows, down_rows = wide_tile_rows(kind)
        fwd._launch("halo_quant.cu", f"halo_moe_glu_{kind}", (F // glu_rows, tiles), 128,
                    glu + (s.tiles,) + glu_tail + (s.act,))
        fwd._launch("halo_quant.cu", f"halo_moe_down_{kind}", (E // down_rows, tiles), 128,
                    down + (s.tiles, pointer_or_null(moe.down_bias), s.down))
    elif tiled:
        rows, warps = (TN_ROWS * TN_WARPS, TN_WARPS) if kind == "tn" else (BQ_ROWS, MATMUL_WARPS)
        fwd._launch("halo_quant.cu", f"halo_moe_glu_{kind}_t{nt}", (-(-F // rows), tiles), 32 * warps,
                    glu + (s.tiles,) + glu_tail + (s.act,))
        fwd._launch("halo_quant.cu", f"halo_moe_down_{kind}_t{nt}", (-(-E // rows), tiles), 32 * warps,
                    down + (s.tiles, pointer_or_null(moe.down_bias), s.down))
    else:
        fwd._launch("halo_quant.cu", "halo_moe_glu_grouped", (-(-F // MOE_WARPS), n), 32 * MOE_WARPS,
                    glu + glu_tail + (s.act,))
        fwd._launch("halo_quant.cu", "halo_moe_down_grouped", (-(-E // MOE_WARPS), n), 32 * MOE_WARPS,
                    down + (pointer_or_null(moe.down_bias), s.down))
    fwd._launch("halo_quant.cu", "halo_moe_combine", -(-T * E // 256), 256,
                (s.down, s.weights, np.int32(k), np.int32(T), np.int32(E), Y))


def decode_bytes(moe: DeviceMoe, k: int) -> int:
    """Weight bytes one decode token reads from this layer's MoE FFN: the router and k experts."""
    per_expert = sum(m.rows * m.row_bytes for m in (moe.gate, moe.up, moe.down))
    return moe.router.rows * moe.router.row_bytes + k * per_expert
