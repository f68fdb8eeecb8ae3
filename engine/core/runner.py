"""The model runner: one scheduled step in, one asynchronous output out. Never blocks on the device.

    SchedulerOutput -> build_step_input -> executor.run(batch, prev ids, slot buffers) [compute stream]
                    -> ReadbackPool.start (fork event -> copy stream -> pinned -> ready event)
                    -> PendingStep; its get_output() (a step later) -> StepOutput of host ids

The executor (CpuStepExecutor, GpuStepExecutor) is the only backend-specific part: it fills the step's
placeholder ids (-1) ON THE DEVICE from the previous step's sampled-id buffer, runs the forward pass and
samples, writing the ids into the slot's device buffer. The runner keeps the previous step's slot
referenced until its output was read, so that buffer is alive while the next step reads it.

Contract: steps are executed in scheduled order on one compute stream; `prev_step_id` of a step is
always the step executed just before it (the scheduler guarantees it; checked here).
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.api import TOP_LOGITS_MAX
from engine.backends.async_output import AsyncOutput, ReadbackPool, ReadbackSlot
from engine.backends.base import Backend, DeviceBuffer, Stream
from engine.core.sched_types import ScheduledSeq, SchedulerOutput, StepOutput
from engine.core.step_batch import StepBatch, build_step_input

# TESTS ONLY. "1" makes get_output() read the sampled ids by dereferencing the device pointer on the
# host: the original bug (docs/ORIGIN.md), kept reachable so a test can show in a child process that
# the fault the typed API prevents is real (SIGSEGV on discrete GPU memory). Never set it otherwise.
UNSAFE_READBACK_ENV = "HALO_UNSAFE_HOST_READBACK"


class StepExecutor(Protocol):
    """What a backend's model must offer the runner (CPU: CpuStepExecutor, GPU: GpuStepExecutor)."""

    backend: Backend
    stream: Stream                 # the compute stream every step is enqueued on, in order

    def run(self, batch: StepBatch, seqs: Sequence[ScheduledSeq], prev_ids: DeviceBuffer | None,
            out: dict[str, DeviceBuffer]) -> dict[str, object]:
        """Enqueue one step: fill batch.prev_token_dst from prev_ids[batch.prev_token_src] on the device,
        forward, sample one id per row into out["ids"] [S] (rows with samples=False: any value). Returns
        {request_id: first top logits}: a tuple of (id, logit) pairs when known at launch (CPU), or a
        DeviceTopLogits the executor wrote into out["top_ids"] / out["top_vals"] (GPU). Must not wait for
        the device unless the backend executes at submission anyway."""

    def forget(self, request_ids: Iterable[str]) -> None:
        """Drop per-request state (sampler RNG, seen ids) of finished requests."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class RowError:
    """An executor's extras value for a row whose sampling failed: only that request fails (EngineCore)."""
    message: str


@dataclass(frozen=True)
class DeviceTopLogits:
    """A request's first-step top logits still on the device: `k` pairs at [offset, offset + k) of the
    step's top_ids / top_vals readback fields, best first. PendingStep.get_output() turns it into pairs."""
    offset: int
    k: int


def readback_fields(max_num_seqs: int) -> dict[str, tuple[str, int]]:
    n = max_num_seqs * TOP_LOGITS_MAX
    return {"ids": ("int32", max_num_seqs), "top_ids": ("int32", n), "top_vals": ("float32", n)}


@dataclass
class PendingStep:
    """One launched step whose sampled ids are on their way to the host. `get_output()` once, in order."""

    step_id: int
    output: AsyncOutput | None                       # None: the launch failed (see `error`)
    extras: dict[str, object] = field(default_factory=dict)
    error: BaseException | None = None
    unsafe_device_ids: DeviceBuffer | None = None     # set only under UNSAFE_READBACK_ENV (tests)

    @property
    def failed(self) -> bool:
        return self.error is not None

    def get_output(self) -> StepOutput:
        """Blocks only on the step's ready event. Raises the launch error for a failed step."""
        if self.error is not None:
            raise self.error
        if self.unsafe_device_ids is not None:
            return StepOutput(self.step_id, _unsafe_host_read(self.unsafe_device_ids, self.output))
        out = self.output.get_output()
        for rid, extra in self.extras.items():
            if isinstance(extra, DeviceTopLogits):
                ids = out["top_ids"][extra.offset:extra.offset + extra.k].tolist()
                vals = out["top_vals"][extra.offset:extra.offset + extra.k].tolist()
                self.extras[rid] = tuple(zip(ids, vals, strict=True))
        return StepOutput(self.step_id, out["ids"].tolist())


def _unsafe_host_read(buf: DeviceBuffer, output: AsyncOutput) -> list[int]:
    """The bug on purpose (tests only): wait for the step, then read its ids at the device address."""
    n = len(output.get_output()["ids"])                 # waits and releases the slot, like the old code
    raw = ctypes.string_at(buf.ptr, 4 * n)               # a host read of device memory: faults on a GPU
    return np.frombuffer(raw, dtype=np.int32).tolist()


class ModelRunner:
    """Owns the executor and the readback pool. Engine thread only."""

    def __init__(self, executor: StepExecutor, block_size: int, max_num_seqs: int, slots: int = 3):
        self.executor = executor
        self.backend = executor.backend
        self.block_size = block_size
        self.pool = ReadbackPool(self.backend, readback_fields(max_num_seqs), slots=slots)
        self._last: tuple[int, ReadbackSlot] | None = None    # (step id, slot) of the newest launch
        # Test-only fault injection: called with each step's plan before it is launched; may raise.
        self.fault_injector: Callable[[SchedulerOutput], None] | None = None
        self.unsafe_host_readback = os.environ.get(UNSAFE_READBACK_ENV) == "1"

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes the executor's KV cache (and recurrent state) really holds: what memory estimates must match."""
        return int(self.executor.kv.nbytes)

    def execute(self, plan: SchedulerOutput) -> PendingStep:
        """Launch `plan` (non-blocking). A launch error comes back inside the PendingStep, never raised."""
        try:
            self.executor.forget(plan.finished_request_ids)
            if self.fault_injector is not None:
                self.fault_injector(plan)
            batch = build_step_input(plan, self.block_size)
            prev_ids = self._prev_ids(plan)
            slot = self.pool.acquire()
        except Exception as e:           # noqa: BLE001 - the core fails this step's requests
            self._last = None
            return PendingStep(plan.step_id, None, error=e)
        try:
            extras = self.executor.run(batch, plan.seqs, prev_ids, slot.device)
            counts = {"ids": batch.num_seqs}
            on_device = [e.offset + e.k for e in extras.values() if isinstance(e, DeviceTopLogits)]
            if on_device:
                counts["top_ids"] = counts["top_vals"] = max(on_device)
            output = self.pool.start(slot, counts, self.executor.stream)
        except Exception as e:           # noqa: BLE001
            self.pool.release(slot)
            self._last = None
            return PendingStep(plan.step_id, None, error=e)
        self._last = (plan.step_id, slot)
        unsafe = slot.device["ids"] if self.unsafe_host_readback else None
        return PendingStep(plan.step_id, output, extras, unsafe_device_ids=unsafe)

    def _prev_ids(self, plan: SchedulerOutput) -> DeviceBuffer | None:
        if plan.prev_step_id is None:
            return None
        if self._last is None or self._last[0] != plan.prev_step_id:
            have = self._last[0] if self._last else None
            raise RuntimeError(f"step {plan.step_id} reads the sampled ids of step {plan.prev_step_id}, "
                               f"but the last launched step is {have}")
        return self._last[1].device["ids"]

    def close(self) -> None:
        self._last = None
        self.pool.close()
        self.executor.close()


def top_logits(logits: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    """The k best (id, logit) pairs of logits [vocab], best first (ties: lower id first)."""
    k = min(k, logits.size)
    top = np.argpartition(-logits, k - 1)[:k]
    top = top[np.argsort(-logits[top], kind="stable")]
    return tuple((int(i), float(logits[i])) for i in top)
