"""Steps on a GPU backend: engine.gpu's forward pass and on-device sampler behind the executor contract.

Per step, all on the model's compute stream, never waiting on the host:
  1. the packed step metadata goes up in one H2D copy (placeholder ids go up as -1);
  2. each run of placeholders is overwritten on the device by a D2D copy from the previous step's
     sampled-id buffer (a ReadbackPool slot the runner keeps alive): ids never round-trip the host;
  3. the forward pass + sampler: a captured graph for pure decode steps (T == S), eager otherwise;
  4. the sampled ids are copied D2D into this step's slot; the runner then starts its readback.
Per request: the RNG stream position (tokens drawn so far) for seeded sampling. The repetition penalty
needs no host state: the sampler reads the sequence's id history from the device (token_at_slot). A
request's first-step top logits are computed by the sampler and copied D2D into the readback slot.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.api import TOP_LOGITS_MAX
from engine.backends.base import DeviceBuffer
from engine.core.built import BuiltModel, kv_blocks
from engine.core.engine_core import EngineCore
from engine.core.runner import DeviceTopLogits, ModelRunner
from engine.core.sched_types import ScheduledSeq
from engine.core.setup import BackendChoice, device_prefill_chunk, make_scheduler, step_tokens
from engine.core.step_batch import StepBatch
from engine.gpu.forward import view
from engine.gpu.stepmeta import SamplingRow
from engine.model.arch import BLOCK_SIZE, DEFAULT_KV_CACHE_TYPE


def placeholder_runs(dst: np.ndarray, src: np.ndarray) -> list[tuple[int, int, int]]:
    """(dst start, src start, length) runs where both indices advance by one: steady decode is one run."""
    runs: list[tuple[int, int, int]] = []
    for d, s in zip(dst.tolist(), src.tolist(), strict=True):
        if runs and runs[-1][0] + runs[-1][2] == d and runs[-1][1] + runs[-1][2] == s:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((d, s, 1))
    return runs


class GpuStepExecutor:
    def __init__(self, model, kv):
        self.model = model                      # engine.gpu.model.GpuModel
        self.kv = kv                            # its GpuKVCache
        self.backend = model.backend
        self.stream = model.stream
        self._drawn: dict[str, int] = {}        # request id -> tokens sampled so far (RNG position)

    def run(self, batch: StepBatch, seqs: Sequence[ScheduledSeq], prev_ids: DeviceBuffer | None,
            out: dict[str, DeviceBuffer]) -> dict[str, object]:
        m, kv, stream = self.model, self.kv, self.stream
        sampling, extras = [], {}
        for seq in seqs:
            drawn = self._drawn.get(seq.request_id, 0)
            report = seq.params.top_logits if seq.samples and drawn == 0 else 0
            row = SamplingRow.from_params(seq.params, drawn, report)
            sampling.append(row)
            if row.report_top:
                extras[seq.request_id] = DeviceTopLogits(seq.row * TOP_LOGITS_MAX, row.report_top)
            if seq.samples:
                self._drawn[seq.request_id] = drawn + 1
        S = batch.num_seqs
        m.enqueue_step(batch, kv, sampling, prev_ids=prev_ids,
                       placeholders=placeholder_runs(batch.prev_token_dst, batch.prev_token_src))
        self.backend.copy_d2d_async(view(out["ids"], 0, S), m.sampled_ids(S), stream)
        if extras:
            n = S * TOP_LOGITS_MAX
            top_ids, top_vals = m.top_pairs(n)
            self.backend.copy_d2d_async(view(out["top_ids"], 0, n), top_ids, stream)
            self.backend.copy_d2d_async(view(out["top_vals"], 0, n), top_vals, stream)
        return extras

    def forget(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self._drawn.pop(rid, None)

    def close(self) -> None:
        self.backend.synchronize()
        self.kv.free()
        self.model.close()
        self.backend.close()


def device_label(backend) -> str:
    try:
        name = backend.rt.device_name(backend.device)
    except Exception:                   # noqa: BLE001 - a label only
        name = getattr(backend, "arch", "gpu")
    return f"{backend.api}:{name}"


def build_gpu_model(path: Path, choice: BackendChoice, on_progress, *, max_context: int, max_num_seqs: int,
                    prefill_chunk: int | None, kv_cache_tokens: int | None,
                    kv_cache_type: str = DEFAULT_KV_CACHE_TYPE) -> BuiltModel:
    """`kv_cache_type` (engine.model.arch.KV_CACHE_TYPES): the pre-flight counts, and the cache holds, K and V of
    that type; the built ModelInfo.kv_cache_type is the cache's own. `prefill_chunk` None: the GPU's default, or a
    shorter step where only that fits (preflight.fitting_prefill_chunk)."""
    from engine.backends.registry import create
    from engine.gguf import open_gguf
    from engine.gpu.model import GpuModel
    from engine.gpu.preflight import fitting_prefill_chunk
    from engine.model.config import ModelConfig
    from engine.model.loader import model_info
    from engine.prompt import PromptFormat

    # The tokenizer (0.16-0.3 s of Python for the 4B shape-alike's 49k-token BPE vocabulary on the CI machine) is
    # built on a worker while the weights upload: the runtime's copies and the finite-scale scans release the GIL.
    # The file is opened once: its header (vocabulary included) is parsed once.
    with open_gguf(Path(path)) as gguf, ThreadPoolExecutor(1, thread_name_prefix="halo-tokenizer") as worker:
        config = ModelConfig.from_metadata(gguf.metadata)
        metadata, info = dict(gguf.metadata), model_info(Path(path), gguf, config)
        prompt_format = worker.submit(PromptFormat.from_metadata, metadata)
        max_context = min(config.context_length, max_context)
        num_blocks = kv_blocks(max_context, kv_cache_tokens)
        backend = create(choice.name)
        try:
            asked = prefill_chunk
            prefill_chunk = fitting_prefill_chunk(config, list(gguf.tensors.values()), num_blocks, BLOCK_SIZE,
                                                  max_num_seqs, kv_cache_type, backend.memory_info().free,
                                                  prefill_chunk)
            budget = step_tokens(prefill_chunk, max_num_seqs)
            model = GpuModel.from_gguf(gguf, backend, max_tokens=budget, max_seqs=max_num_seqs, kv_blocks=num_blocks,
                                       block_size=BLOCK_SIZE, progress=on_progress, kv_type=kv_cache_type)
            kv = model.new_kv_cache(num_blocks, BLOCK_SIZE)
        except BaseException:
            backend.close()
            raise
    executor = GpuStepExecutor(model, kv)
    try:
        fmt = prompt_format.result()         # what the tokenizer refused, as when it was built after the upload
    except BaseException:
        executor.close()
        raise
    scheduler = make_scheduler(num_blocks, BLOCK_SIZE, max_context, choice.async_scheduling, max_num_seqs,
                               prefill_chunk, "gpu")
    core = EngineCore(scheduler, ModelRunner(executor, BLOCK_SIZE, max_num_seqs))
    default = device_prefill_chunk("gpu")
    note = (f"shortened from {default:,} tokens: the longer step's scratch did not fit the GPU's free memory"
            if asked is None and prefill_chunk < default else "")
    return BuiltModel(replace(info, backend=device_label(backend), kv_cache_type=kv.kv_type,
                              prefill_chunk=prefill_chunk, prefill_note=note),
                      fmt, config.vocab_size, core, max_context)
