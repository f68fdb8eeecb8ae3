"""The Engine on a real GPU (engine.gpu's forward + on-device sampler) with async scheduling on and off,
on the tiny random-weight llama (tests/golden/data; real models cannot travel to the GPU machine):
same greedy ids with one request and 8 concurrent ones, equal to each run alone; abort and an injected
step failure stay local; KV blocks all free after. A child process runs a whole async generation with
every device-to-host copy recorded (all go into pinned memory, only the sampled ids travel) and no host
view of device memory attempted; the same child with HALO_UNSAFE_HOST_READBACK=1 reads the device
pointer on the host, as the original bug did, and dies with SIGSEGV.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("engine.gpu.model")

from engine.api import GenerateRequest, SamplingParams  # noqa: E402
from engine.engine import Engine  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "golden" / "data" / "tiny-llama-q4_1.gguf"
TIMEOUT = 180
TEXTS = ["The quick brown fox", "Once upon a time there was a small", "A", "Numbers: one two three four five six",
         "The history of computing is a story of people", "Hello world", "Paged attention splits the cache",
         "Seven"]
MAX_TOKENS = [12, 7, 16, 9, 5, 14, 10, 8]


def req(i: int, rid: str) -> GenerateRequest:
    return GenerateRequest(prompt=TEXTS[i], request_id=rid, params=SamplingParams.greedy(max_tokens=MAX_TOKENS[i]))


def make_engine(gpu_name: str, async_on: bool, max_num_seqs: int = 8) -> Engine:
    eng = Engine(max_context=256, backend=gpu_name, async_scheduling=async_on, max_num_seqs=max_num_seqs)
    eng.load(MODEL).result(TIMEOUT)
    return eng


@pytest.fixture(scope="module")
def alone(gpu_name):
    eng = make_engine(gpu_name, async_on=False, max_num_seqs=1)
    try:
        return [eng.submit(req(i, f"ref{i}")).text(TIMEOUT)[1].output_token_ids for i in range(len(TEXTS))]
    finally:
        eng.shutdown()


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def engine(request, gpu_name):
    eng = make_engine(gpu_name, request.param)
    yield eng
    eng.shutdown()


def test_runs_on_the_gpu_in_the_mode_asked(engine):
    info = engine.model_info
    assert info.backend.startswith(("cuda:", "hip:")), info.backend
    if info.async_scheduling:
        assert "safe async sampled-token readback" in info.async_reason
    else:
        assert "Settings" in info.async_reason


def test_one_and_eight_concurrent_requests_equal_each_run_alone(engine, alone):
    assert engine.submit(req(0, "one")).text(TIMEOUT)[1].output_token_ids == alone[0]
    handles = [engine.submit(req(i, f"c{i}")) for i in range(len(TEXTS))]
    got = [h.text(TIMEOUT)[1] for h in handles]
    assert [f.error for f in got] == [None] * len(TEXTS)
    assert [f.output_token_ids for f in got] == alone
    assert engine._model.core.scheduler.kv.num_used == 0


def test_abort_one_mid_stream_leaves_the_others_identical(engine, alone):
    others = [engine.submit(req(i, f"o{i}")) for i in (1, 5, 6)]
    victim = engine.submit(GenerateRequest(prompt="Abort me", request_id="victim",
                                           params=SamplingParams.greedy(max_tokens=200)))
    for n, _event in enumerate(victim.events(TIMEOUT), start=1):
        if n == 3:
            victim.abort()
    assert victim.finished.reason == "abort"
    assert [h.text(TIMEOUT)[1].output_token_ids for h in others] == [alone[i] for i in (1, 5, 6)]
    assert engine._model.core.scheduler.kv.num_used == 0


def test_injected_step_failure_fails_its_requests_only(engine, alone):
    launched = []

    def fail_fourth(plan):
        launched.append(plan.step_id)
        if len(launched) == 4:
            raise RuntimeError("injected device fault")
    engine.set_fault_injector(fail_fourth).result(TIMEOUT)
    try:
        handles = [engine.submit(req(i, f"f{i}")) for i in (0, 2)]       # both in the failing step
        fins = [h.text(TIMEOUT)[1] for h in handles]
    finally:
        engine.set_fault_injector(None).result(TIMEOUT)
    assert [f.reason for f in fins] == ["error", "error"] and "injected device fault" in fins[0].error
    assert engine._model.core.scheduler.kv.num_used == 0
    assert engine.submit(req(2, "after")).text(TIMEOUT)[1].output_token_ids == alone[2]


CHILD = r"""
import json, sys
from engine.api import GenerateRequest, SamplingParams
from engine.backends.base import DeviceBuffer, PinnedHostBuffer
from engine.backends.gpu import GpuBackend
from engine.engine import Engine

d2h, refusals = [], []
copy = GpuBackend.copy_d2h_async
def recorded_copy(self, dst, src, stream, nbytes=None):
    d2h.append((type(dst).__name__, type(src).__name__, nbytes))
    return copy(self, dst, src, stream, nbytes)
GpuBackend.copy_d2h_async = recorded_copy
refuse = DeviceBuffer._refuse
def recorded_refusal(self, *a, **k):
    refusals.append(repr(self))
    return refuse(self, *a, **k)
for name in ("__array__", "host_view", "tolist", "__getitem__", "__iter__", "__buffer__", "__int__", "__index__"):
    setattr(DeviceBuffer, name, recorded_refusal)

eng = Engine(max_context=256, backend=sys.argv[1], async_scheduling=True)
info = eng.load(sys.argv[2]).result(180)
handles = [eng.submit(GenerateRequest(prompt=t, params=SamplingParams.greedy(max_tokens=12)))
           for t in ("The quick brown fox", "Hello world", "Once upon a time there was a small")]
fins = [h.text(180)[1] for h in handles]
eng.shutdown()
print(json.dumps({"async": info.async_scheduling, "ids": [list(f.output_token_ids) for f in fins],
                  "errors": [f.error for f in fins], "d2h": d2h, "refusals": refusals}))
"""


def run_child(gpu_name: str, unsafe: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("HALO_UNSAFE_HOST_READBACK", None)
    if unsafe:
        env["HALO_UNSAFE_HOST_READBACK"] = "1"
    return subprocess.run([sys.executable, "-c", CHILD, gpu_name, str(MODEL)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)


def test_host_never_reads_device_memory_and_the_unsafe_read_really_faults(gpu_name):
    safe = run_child(gpu_name, unsafe=False)
    assert safe.returncode == 0, safe.stderr[-3000:]
    report = json.loads(safe.stdout.strip().splitlines()[-1])
    assert report["async"] is True and report["errors"] == [None, None, None]
    assert all(len(ids) > 0 for ids in report["ids"])
    assert report["refusals"] == []                                    # no host view was even attempted
    assert report["d2h"] and all(dst == "PinnedHostBuffer" and src == "DeviceBuffer" and nbytes <= 4 * 8
                                 for dst, src, nbytes in report["d2h"])   # only <= 8 sampled ids per step

    unsafe = run_child(gpu_name, unsafe=True)
    assert unsafe.returncode == -signal.SIGSEGV, (unsafe.returncode, unsafe.stderr[-2000:])
