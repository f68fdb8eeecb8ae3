"""ModelRunner + CpuStepExecutor on the tiny llama: placeholder ids are read from the previous step's
DEVICE buffer (not from the host's copy), outputs come back only through the readback pool, and launch
errors come back inside the PendingStep."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.api import SamplingParams
from engine.backends.registry import create
from engine.core.cpu_executor import CpuStepExecutor
from engine.core.runner import ModelRunner
from engine.core.sched_types import ScheduledSeq, SchedulerOutput
from engine.errors import BackendError, HostAccessError
from engine.model.loader import load_model
from engine.model.step import KVCache

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
GREEDY = SamplingParams.greedy(max_tokens=8)


@pytest.fixture(scope="module")
def tiny():
    lm = load_model(DATA / "tiny-llama-f32.gguf")
    return lm, [int(t) for t in np.load(DATA / "tiny-llama-f32.golden.npz")["prompt_ids"]]


def make_runner(lm, max_seqs=4) -> ModelRunner:
    kv = KVCache.allocate(lm.config, 8, 16)
    return ModelRunner(CpuStepExecutor(create("cpu"), lm.model, kv, max_seqs), 16, max_seqs)


def prefill(step_id, rid, ids):
    seq = ScheduledSeq(rid, 0, 0, tuple(ids), (0, 1), True, params=GREEDY)
    return SchedulerOutput(step_id, (seq,), None)


def decode(step_id, rid, position, prev_row=0, token=-1):
    seq = ScheduledSeq(rid, 0, position, (token,), (0, 1), True, prev_row=prev_row if token == -1 else None,
                       params=GREEDY)
    return SchedulerOutput(step_id, (seq,), step_id - 1 if token == -1 else None)


def test_placeholder_is_taken_from_the_previous_steps_device_buffer(tiny):
    lm, prompt = tiny
    # Reference: feed the id 42 explicitly after the prompt.
    ref = make_runner(lm)
    ref.execute(prefill(0, "a", prompt)).get_output()
    expected = ref.execute(decode(1, "a", len(prompt), token=42)).get_output().sampled_token_ids

    runner = make_runner(lm)
    first = runner.execute(prefill(0, "a", prompt))
    slot_ids = runner._last[1].device["ids"]
    with pytest.raises(HostAccessError):
        np.asarray(slot_ids)                      # the sampled ids have no host view ...
    # ... but the device side can be changed through the typed API: put 42 where the sampler wrote
    runner.backend.copy_h2d_async(slot_ids, np.array([42], np.int32), runner.executor.stream)
    second = runner.execute(decode(1, "a", len(prompt)))          # launched before step 0 is read
    assert first.get_output().sampled_token_ids != [42]           # the host copy was taken before
    assert second.get_output().sampled_token_ids == expected


def test_a_step_reading_ids_of_a_step_that_did_not_run_fails_inside_its_pending_step(tiny):
    lm, prompt = tiny
    runner = make_runner(lm)
    pending = runner.execute(decode(5, "a", 3))                   # step 4 never launched
    assert pending.failed
    with pytest.raises(RuntimeError, match="step 4"):
        pending.get_output()


def test_output_is_read_once_and_slots_are_bounded(tiny):
    lm, prompt = tiny
    runner = make_runner(lm)
    steps = [runner.execute(prefill(0, "a", prompt[:4]))]
    steps += [runner.execute(decode(i, "a", 3 + i)) for i in (1, 2)]
    third_slot = runner.execute(decode(3, "a", 6))               # 3 slots: every one is in flight
    assert third_slot.failed and isinstance(third_slot.error, BackendError)
    out = steps[0].get_output()
    with pytest.raises(BackendError, match="twice"):
        steps[0].output.get_output()
    assert len(out.sampled_token_ids) == 1


def test_placeholder_runs_coalesce_steady_decode_into_one_copy():
    from engine.gpu.executor import placeholder_runs
    assert placeholder_runs(np.array([0, 1, 2, 3]), np.array([0, 1, 2, 3])) == [(0, 0, 4)]
    assert placeholder_runs(np.array([4, 5, 9]), np.array([0, 1, 3])) == [(4, 0, 2), (9, 3, 1)]
    assert placeholder_runs(np.array([], np.int32), np.array([], np.int32)) == []


def test_unsafe_switch_reads_the_device_address_on_the_host(tiny, monkeypatch):
    # On the CPU backend "device" memory is host memory, so the unsafe read works and agrees; on a GPU
    # the same read faults (tests/gpu/test_async_engine_gpu.py shows that in a child process).
    lm, prompt = tiny
    safe = make_runner(lm).execute(prefill(0, "a", prompt)).get_output().sampled_token_ids
    monkeypatch.setenv("HALO_UNSAFE_HOST_READBACK", "1")
    runner = make_runner(lm)
    pending = runner.execute(prefill(0, "a", prompt))
    assert pending.unsafe_device_ids is not None
    assert pending.get_output().sampled_token_ids == safe
