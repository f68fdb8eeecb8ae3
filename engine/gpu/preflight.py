"""Memory pre-flight: what a model needs on the device, computed before anything is allocated.

weights: the GGUF tensors as they are in the file (still quantized) plus float32 copies of the small
         vectors (norms, biases), each allocation rounded up to the allocator's granularity;
kv:      engine.model.arch.kv_cache_bytes (K and V of every attention layer in the cache's `kv_type`, + the
         token id per slot) plus the recurrent state of every linear-attention layer for `max_seqs` sequences;
scratch: activations for `max_tokens` tokens and logits for `max_seqs` rows, the split-K partial sums, the
         sampler's per-row buffers, plus the step metadata;
reserve: the runtime's own context, module code and graph memory (a fixed slice plus a share of the rest).

`check_fits` compares the total with the device's free memory and raises OutOfDeviceMemoryError that
names every figure, so the user sees what did not fit and by how much.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.api import TOP_LOGITS_MAX
from engine.errors import OutOfDeviceMemoryError
from engine.gpu.forward import split_f16_scratch, split_kv_floats, splitk_floats, tch_possible
from engine.gpu.moe import MoeScratch
from engine.model import arch
from engine.model.arch import ALLOC_GRANULARITY
from engine.model.config import ModelConfig
from engine.model.host_memory import HostMemoryPlan, host_shortfall
from engine.model.memory_fit import integrated_gpu_words

MIB = 1 << 20
FIXED_RESERVE = 256 * MIB        # modules, graphs, runtime heaps, the readback pool
RESERVE_FRACTION = 0.02          # and a share of the rest, for fragmentation


def _round(n: int) -> int:
    return -(-n // ALLOC_GRANULARITY) * ALLOC_GRANULARITY


@dataclass(frozen=True)
class MemoryPlan:
    weights: int
    kv: int
    scratch: int
    reserve: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.scratch + self.reserve

    def describe(self) -> str:
        return (f"weights {self.weights / MIB:.1f} MiB + KV cache {self.kv / MIB:.1f} MiB + scratch "
                f"{self.scratch / MIB:.1f} MiB + reserve {self.reserve / MIB:.1f} MiB = {self.total / MIB:.1f} MiB")


def weight_bytes(tensors) -> int:
    """`tensors`: the GGUF's TensorInfos. Quantized matrices upload as-is; 1-D vectors become float32."""
    return arch.weight_bytes(tensors, "gpu")


def kv_bytes(config: ModelConfig, num_blocks: int, block_size: int, kv_type: str = arch.DEFAULT_KV_CACHE_TYPE) -> int:
    """K and V (`kv_type`, arch.KV_CACHE_TYPES), plus the token id at every slot (the repetition penalty's
    history)."""
    return arch.kv_cache_bytes(config, num_blocks, block_size, "gpu", kv_type)


def scratch_bytes(config: ModelConfig, max_tokens: int, max_seqs: int, max_blocks_per_seq: int,
                  tch: bool = False) -> int:
    """tch: the model can take the tch prefill tile (forward.tch_possible), whose activation split needs scratch."""
    c = config
    qkv = c.q_dim + 2 * c.kv_dim
    per_token = 4 * (3 * c.n_embd + qkv + c.q_dim + c.n_ff)          # x, h, o | qkv | attn | glu out
    logits = 4 * max_seqs * c.vocab_size
    meta = 4 * (4 * max_tokens + 10 * max_seqs + max_seqs * max_blocks_per_seq)
    partial = _round(4 * max(splitk_floats(c, max_tokens), 1)) + _round(4 * max(split_kv_floats(c, max_tokens), 1))
    if tch:                                                        # counted on every device, as the partial sums
        partial += _round(4 * split_f16_scratch(c, max_tokens))
    sampler = 4 * max_seqs * (-(-c.vocab_size // 32) + 2 * TOP_LOGITS_MAX)       # penalty bitmaps, top pairs
    moe = _round(MoeScratch.nbytes(c, max_tokens))
    return (_round(per_token * max_tokens) + _round(logits) + partial + _round(sampler) + 2 * _round(meta)
            + moe)


def plan_memory(config: ModelConfig, tensors, num_blocks: int, block_size: int, max_tokens: int,
                max_seqs: int, kv_type: str = arch.DEFAULT_KV_CACHE_TYPE) -> MemoryPlan:
    est = arch.blocks_memory_estimate(config, num_blocks, block_size, "gpu", tensors, max_seqs, kv_type)
    w, kv = est.weights, est.kv_cache + est.recurrent_state
    tch = tch_possible(t.ggml_type for t in tensors if len(t.shape) >= 2)     # matrices and stacked experts
    scratch = scratch_bytes(config, max_tokens, max_seqs, num_blocks, tch)
    reserve = FIXED_RESERVE + int(RESERVE_FRACTION * (w + kv + scratch))
    return MemoryPlan(w, kv, scratch, reserve)


def check_fits(plan: MemoryPlan, free: int, total: int, what: str = "the model",
               host_plan: HostMemoryPlan | None = None, integrated: bool = False,
               dedicated: int | None = None) -> None:
    """Raise OutOfDeviceMemoryError with the numbers when `plan` needs more than `free` bytes. With the
    CPU path's `host_plan` the advice says whether the CPU can hold the model instead (`err.cpu_fits`);
    without it the CPU is not suggested. An `integrated` GPU's refusal also says how its memory is split
    between the firmware's `dedicated` part and borrowed system memory (engine.model.memory_fit)."""
    if plan.total <= free:
        return
    advice, cpu_fits = "use a smaller context or quantization", None
    if integrated:
        advice = integrated_gpu_words(total, dedicated) + " Or " + advice
    if host_plan is not None:
        short = host_shortfall(host_plan)
        cpu_fits = short is None
        advice += ", or the CPU" if cpu_fits else f" (the CPU cannot hold it either: it {short})"
    err = OutOfDeviceMemoryError(
        f"{what} needs {plan.total / MIB:.1f} MiB of device memory but only {free / MIB:.1f} MiB of "
        f"{total / MIB:.1f} MiB are free ({plan.describe()}); {advice}")
    err.plan = plan
    err.free = free
    err.cpu_fits = cpu_fits
    raise err


def fitting_prefill_chunk(config: ModelConfig, tensors, num_blocks: int, block_size: int, max_seqs: int,
                          kv_type: str, free: int, asked: int | None = None) -> int:
    """Prompt tokens per step for a model on this GPU: `asked` where given; else the GPU's default
    (engine.core.setup.DEFAULT_PREFILL_CHUNK), halved while the plan for it would not fit `free` bytes, down to
    GPU_PREFILL_CHUNK_FLOOR (whose plan the load then checks as any other): the step's scratch grows with it (~0.4 GB
    from 256 to 2,048 tokens for Qwen3-30B-A3B), and a model that fits with shorter steps loads with them."""
    from engine.core.setup import GPU_PREFILL_CHUNK_FLOOR, device_prefill_chunk, step_tokens
    if asked:
        return asked
    chunk = device_prefill_chunk("gpu")
    while chunk > GPU_PREFILL_CHUNK_FLOOR and plan_memory(config, tensors, num_blocks, block_size,
                                                          step_tokens(chunk, max_seqs), max_seqs, kv_type).total > free:
        chunk //= 2
    return chunk


def max_kv_blocks(config: ModelConfig, tensors, block_size: int, max_tokens: int, max_seqs: int,
                  free: int, fraction: float = 0.9, kv_type: str = arch.DEFAULT_KV_CACHE_TYPE) -> int:
    """The most KV blocks that fit in `fraction` of `free` next to the weights and scratch (0 if none)."""
    base = plan_memory(config, tensors, 0, block_size, max_tokens, max_seqs)
    per_block = kv_bytes(config, 1, block_size, kv_type) + 4 * max_seqs          # + its block-table column
    room = int(free * fraction) - base.total
    return max(0, int(room / (per_block * (1 + RESERVE_FRACTION))))
