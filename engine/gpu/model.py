"""GpuModel: load (pre-flight, upload), KV caches, and steps - eager, or replayed from a captured graph.

Decode steps (one token per sequence, T == S) are captured once per (cache, T) into a CUDA/HIP graph and
replayed: one graph launch instead of ~8 x layers kernel launches from Python. Prefill and mixed steps
run eagerly. The sampled ids come back through the backend's ReadbackPool; with `ids_on_device` the next
decode step reads its input ids from where the sampler wrote them, never through the host.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from engine.backends.async_output import AsyncOutput, ReadbackPool
from engine.backends.base import Backend, DeviceBuffer
from engine.backends.gpu import device_attribute, pdl_every_kernel
from engine.gpu.forward import GpuForward, GpuKVCache, view
from engine.gpu.preflight import MemoryPlan, check_fits, kv_bytes, plan_memory
from engine.gpu.stepmeta import SamplingRow
from engine.gpu.weights import upload_weights
from engine.model.arch import BLOCK_SIZE, DEFAULT_KV_CACHE_TYPE, recurrent_state_bytes
from engine.model.config import ModelConfig
from engine.model.host_memory import plan_host_memory
from engine.model.memory_fit import amd_dedicated_bytes
from engine.model.step import StepInput

log = logging.getLogger(__name__)


class _Graph:
    def __init__(self, rt, graph, graph_exec, launches: int):
        self.rt, self.graph, self.exec, self.launches = rt, graph, graph_exec, launches

    def destroy(self) -> None:
        self.rt.graph_exec_destroy(self.exec)
        self.rt.graph_destroy(self.graph)


def _integrated(backend: Backend) -> bool:
    """Whether the device is an integrated GPU (its runtime's own attribute; False where it cannot say: no
    integrated-GPU words, nothing else changes)."""
    return bool(device_attribute(backend, "integrated"))


class GpuModel:
    def __init__(self, backend: Backend, config: ModelConfig, forward: GpuForward, plan: MemoryPlan | None,
                 use_graphs: bool = True, kv_type: str = DEFAULT_KV_CACHE_TYPE):
        self.backend, self.config, self.fwd, self.plan = backend, config, forward, plan
        self.kv_type = kv_type                # what the pre-flight counted; new_kv_cache's default
        self.rt = getattr(backend, "rt", None)
        self.use_graphs = use_graphs and self.rt is not None
        self._graphs: dict[tuple[int, int, bool], _Graph] = {}
        self.graph_error: str | None = None

    @staticmethod
    def load(path: Path, backend: Backend, *, max_tokens: int = 512, max_seqs: int = 16, kv_blocks: int = 0,
             block_size: int = BLOCK_SIZE, use_graphs: bool = True, progress=None,
             kv_type: str = DEFAULT_KV_CACHE_TYPE) -> GpuModel:
        """Pre-flight (weights + `kv_blocks` KV blocks of `kv_type` + scratch vs free memory), then upload. Raises
        OutOfDeviceMemoryError with the numbers before allocating anything when it cannot fit. The KV cache
        itself comes from new_kv_cache, of `kv_type` unless it is given another."""
        from engine.gguf import open_gguf

        with open_gguf(Path(path)) as gguf:
            return GpuModel.from_gguf(gguf, backend, max_tokens=max_tokens, max_seqs=max_seqs, kv_blocks=kv_blocks,
                                      block_size=block_size, use_graphs=use_graphs, progress=progress,
                                      kv_type=kv_type)

    @staticmethod
    def from_gguf(gguf, backend: Backend, *, max_tokens: int = 512, max_seqs: int = 16, kv_blocks: int = 0,
                  block_size: int = BLOCK_SIZE, use_graphs: bool = True, progress=None,
                  kv_type: str = DEFAULT_KV_CACHE_TYPE) -> GpuModel:
        """`load` from a GGUFFile the caller has open (and closes after), so its header is parsed once (the
        vocabulary's string arrays: ~60 ms for the Qwen3-4B shape-alike's 49k tokens on the CI machine). Returns
        once the weights are on the device."""
        config = ModelConfig.from_metadata(gguf.metadata)
        if hasattr(backend, "programmatic_everything"):
            backend.programmatic_everything = pdl_every_kernel(config.n_embd)
        tensors = list(gguf.tensors.values())
        plan = plan_memory(config, tensors, kv_blocks, block_size, max_tokens, max_seqs, kv_type)
        mem = backend.memory_info()
        if plan.total > mem.free:     # say whether the CPU could hold it instead
            host = plan_host_memory(config, tensors, kv_blocks, block_size, max_tokens, max_seqs)
            integrated = _integrated(backend)
            check_fits(plan, mem.free, mem.total, what=gguf.path.name, host_plan=host, integrated=integrated,
                       dedicated=amd_dedicated_bytes() if integrated else None)
        stream = backend.create_stream()
        weights = fwd = None
        try:                # a kernel that fails to compile, or a cancel while they load, gives everything back
            weights = upload_weights(backend, gguf, config, stream, progress)   # frees its own on failure
            stream.synchronize()
            fwd = GpuForward(backend, config, weights, max_tokens, max_seqs, stream)   # owns the stream from here
            fwd.warm_up(progress)
        except BaseException:
            if fwd is not None:
                fwd.free()
            else:
                backend.destroy_stream(stream)
            if weights is not None:
                weights.free(backend)
            raise
        return GpuModel(backend, config, fwd, plan, use_graphs, kv_type)

    def new_kv_cache(self, num_blocks: int, block_size: int = BLOCK_SIZE, state_slots: int | None = None,
                     kv_type: str | None = None) -> GpuKVCache:
        """state_slots (hybrid models): sequences holding recurrent state at once; default max_seqs, the
        scheduler's StateSlots count (engine.core.scheduler). kv_type: engine.model.arch.KV_CACHE_TYPES; default
        the type the model was loaded (and pre-flighted) with."""
        slots = self.fwd.max_seqs if state_slots is None else state_slots
        kv_type = self.kv_type if kv_type is None else kv_type
        need = kv_bytes(self.config, num_blocks, block_size, kv_type) + slots * recurrent_state_bytes(self.config)
        mem = self.backend.memory_info()
        if need > mem.free:
            check_fits(MemoryPlan(0, need, 0, 0), mem.free, mem.total, what=f"a KV cache of {num_blocks} blocks")
        kv = GpuKVCache(self.backend, self.config, num_blocks, block_size, self.fwd.max_tokens, self.fwd.max_seqs,
                        self.fwd.stream, slots, kv_type)
        self.fwd.stream.synchronize()
        return kv

    # steps -------------------------------------------------------------------------------------------
    def forward(self, step: StepInput, kv: GpuKVCache):
        """Logits on the host (tests, parity, the CpuModel drop-in)."""
        return self.fwd.forward(step, kv)

    @property
    def stream(self):
        """The compute stream every step is queued on."""
        return self.fwd.stream

    def enqueue_step(self, step: StepInput, kv: GpuKVCache, sampling: list[SamplingRow] | None = None, *,
                     ids_on_device: bool = False, feed_next: bool = False, prev_ids: DeviceBuffer | None = None,
                     placeholders: Iterable[tuple[int, int, int]] = ()) -> None:
        """Queue one step on `self.stream`, never waiting on the host: the metadata upload (ids too unless
        `ids_on_device`), then D2D copies of input ids (dst row, src row, count) from `prev_ids` (the
        previous step's sampled ids), then the body and sampler - a captured graph for pure decode steps
        (one token and one output per sequence), eager otherwise. `feed_next`: the sampler writes each id
        as the next step's input. The sampled ids are in `sampled_ids(S)` once the stream gets there."""
        T, n_out = step.num_tokens, len(step.logits_indices)
        graph = None
        if self.use_graphs and T == step.num_seqs == n_out:
            graph = self._graph(kv, T, feed_next)          # captured before this step's upload is queued
        kv.upload(step, sampling, self.stream, ids_on_device)
        for dst, src, n in placeholders:
            self.backend.copy_d2d_async(view(kv.ids, dst, n), view(prev_ids, src, n), self.stream)
        if graph is None:
            self.fwd.enqueue_body(kv, T, n_out, True, feed_next, step.num_seqs)
        else:
            self.rt.graph_launch(graph.exec, self.stream.handle)

    def sampled_ids(self, n: int) -> DeviceBuffer:
        """int32 [n]: the last queued step's sampled ids (device memory, overwritten by the next step)."""
        return view(self.fwd.sampled, 0, n)

    def top_pairs(self, n: int) -> tuple[DeviceBuffer, DeviceBuffer]:
        """(ids int32, logits float32), each [n]: the last step's reported top logits, TOP_LOGITS_MAX per row."""
        return view(self.fwd.top_ids, 0, n), view(self.fwd.top_vals, 0, n)

    def step(self, step: StepInput, kv: GpuKVCache, pool: ReadbackPool, sampling: list[SamplingRow] | None = None,
             ids_on_device: bool = False, feed_next: bool = False) -> AsyncOutput:
        """enqueue_step, then start the ids' readback through `pool` (the benchmark's and tests' loop)."""
        self.enqueue_step(step, kv, sampling, ids_on_device=ids_on_device, feed_next=feed_next)
        return self.fwd.start_readback(pool, len(step.logits_indices))

    def launches_per_step(self, kv: GpuKVCache, T: int, feed_next: bool = True) -> int | None:
        g = self._graphs.get((id(kv), T, feed_next))
        return g.launches if g else None

    def _graph(self, kv: GpuKVCache, T: int, feed_next: bool) -> _Graph | None:
        key = (id(kv), T, feed_next)
        if key in self._graphs:
            return self._graphs[key]
        stream = self.fwd.stream
        try:
            self.backend.begin_capture(stream)
        except NotImplementedError as e:
            self.use_graphs, self.graph_error = False, str(e)
            return None
        try:
            self.fwd.enqueue_body(kv, T, T, True, feed_next)
        finally:
            graph = self.backend.end_capture(stream)
        graph_exec = self.rt.graph_instantiate(graph)
        self._graphs[key] = _Graph(self.rt, graph, graph_exec, self.fwd.launches)
        return self._graphs[key]

    def drop_graphs(self, kv: GpuKVCache | None = None) -> None:
        for key in [k for k in self._graphs if kv is None or k[0] == id(kv)]:
            self._graphs.pop(key).destroy()

    def close(self) -> None:
        self.drop_graphs()
        self.fwd.free()
        self.fwd.w.free(self.backend)
