"""Steps on the CPU backend: CpuModel forward + the host Sampler, behind the same executor contract as
the GPU. The CPU backend executes everything at submission, so "the device" here is numpy on this
thread; still, every id that crosses from the device side goes through the backend's typed copies:

- placeholder ids: the previous step's sampled ids are copied from their DeviceBuffer into this
  executor's pinned buffer (copy_d2h_async + event), then scattered into the step's token ids;
- sampled ids: written into the slot's DeviceBuffer with copy_h2d_async (the host reads them only
  through the ReadbackPool, like on a GPU).
Per-request sampling state (Sampler RNG, ids seen for the repetition penalty) lives here, on "the
device side": it includes placeholder ids the host has not received yet.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from engine.api import TOP_LOGITS_MAX
from engine.backends.base import Backend, DeviceBuffer
from engine.core.runner import RowError, top_logits
from engine.core.sched_types import ScheduledSeq
from engine.core.step_batch import StepBatch
from engine.model.step import KVCache
from engine.sampling import Sampler


@dataclass
class _RowState:
    sampler: Sampler
    seen: set[int] = field(default_factory=set)     # prompt + every id fed or sampled so far
    sampled: int = 0


class CpuStepExecutor:
    def __init__(self, backend: Backend, model, kv: KVCache, max_num_seqs: int):
        self.backend = backend
        self.model = model                         # CpuModel: forward(step, kv) -> logits [S, vocab]
        self.kv = kv
        self.stream = backend.create_stream()
        self._prev_host = backend.alloc_pinned(max_num_seqs, np.int32)
        self._prev_ready = backend.create_event()
        self._rows: dict[str, _RowState] = {}

    def run(self, batch: StepBatch, seqs: Sequence[ScheduledSeq], prev_ids: DeviceBuffer | None,
            out: dict[str, DeviceBuffer]) -> dict[str, object]:
        token_ids = batch.token_ids
        if len(batch.prev_token_dst):
            n_prev = int(batch.prev_token_src.max()) + 1
            self.backend.copy_d2h_async(self._prev_host, prev_ids, self.stream, nbytes=4 * n_prev)
            self._prev_ready.record(self.stream)
            self._prev_ready.synchronize()
            token_ids = token_ids.copy()
            token_ids[batch.prev_token_dst] = self._prev_host.array[batch.prev_token_src]
        logits = self.model.forward(replace(batch, token_ids=token_ids), self.kv)     # [S, vocab]

        qsl = batch.query_start_loc
        sampled = np.zeros(batch.num_seqs, dtype=np.int32)
        extras: dict[str, object] = {}
        for seq in seqs:
            row = self._rows.get(seq.request_id)
            if row is None:
                row = self._rows[seq.request_id] = _RowState(Sampler(seq.params))
            row.seen.update(token_ids[qsl[seq.row]:qsl[seq.row + 1]].tolist())
            if not seq.samples:
                continue
            try:
                if row.sampled == 0 and seq.params.top_logits > 0:
                    extras[seq.request_id] = top_logits(logits[seq.row], min(seq.params.top_logits, TOP_LOGITS_MAX))
                token = row.sampler.sample(logits[seq.row], row.seen)
            except Exception as e:    # noqa: BLE001 - this row fails alone; the step and its other rows go on
                extras[seq.request_id] = RowError(f"Sampling failed: {type(e).__name__}: {e}")
                token = 0                  # a placeholder id the core discards with the failed request
            row.seen.add(token)
            row.sampled += 1
            sampled[seq.row] = token
        self.backend.copy_h2d_async(out["ids"], sampled, self.stream)
        return extras

    def forget(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self._rows.pop(rid, None)

    def close(self) -> None:
        self.backend.free_pinned(self._prev_host)
        self.backend.destroy_event(self._prev_ready)
        self.backend.destroy_stream(self.stream)
