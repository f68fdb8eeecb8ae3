"""engine.diagnostics: the report of this machine, reports of other machines (real record types from JSON),
Markdown/JSON round trips, the backend selection and the async scheduling decision, the self-test runner."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine import diagnostics
from engine.backends.facts import ProbeResult
from engine.backends.policy import PINNED_COPY, derive
from engine.diagnostics import ASYNC_ENV, async_scheduling_decision, collect, run_self_test, select_backend
from engine.diagnostics_logits import compare_logits, judge
from engine.diagnostics_report import DiagnosticsReport, LogitsCheck, to_markdown

MACHINES = Path(__file__).parent / "data" / "diagnostics"


def machine(name: str) -> DiagnosticsReport:
    return DiagnosticsReport.from_json((MACHINES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def here() -> DiagnosticsReport:
    return collect(self_test=True)


# -- this machine ------------------------------------------------------------------------------------
def test_report_of_this_machine_has_the_system_and_every_backend(here):
    s = here.system
    assert s.os and s.python.endswith(__import__("platform").python_version())
    assert s.libraries["numpy"] == np.__version__ and s.libraries["jinja2"] != "not installed"
    assert s.memory_total and s.memory_total > s.memory_available > 0
    assert [p.backend for p in here.probes] == ["hip-python", "ctypes-hip", "cuda-python", "ctypes-cuda", "cpu"]
    assert here.probe_for("cpu").available
    assert here.descriptions["ctypes-hip"].startswith("HIP through ctypes")
    md = to_markdown(here)
    for p in here.probes:
        assert f"### {p.backend}: {'available' if p.available else 'NOT AVAILABLE'}" in md
        assert p.reason in md                     # exactly why, word for word


def test_self_test_of_the_selected_backend_passes_and_is_in_the_report(here):
    run = here.self_test
    assert run is not None and run.backend == here.selected_backend and run.passed
    assert run.readback.mismatches == 0 and run.readback.steps > 0 and run.readback.step_us_median > 0
    assert "## Self-test" in to_markdown(here) and f"**{run.backend}: PASSED**" in to_markdown(here)


def test_json_and_markdown_round_trip(here):
    again = DiagnosticsReport.from_json(here.to_json())
    assert again.to_dict() == here.to_dict()
    assert to_markdown(again) == to_markdown(here)
    assert isinstance(again.probes[-1], ProbeResult) and again.self_test.passed


def test_the_json_is_plain_data(here):
    data = json.loads(here.to_json())
    assert data["format_version"] == 1 and data["system"]["platform"]
    assert data["probes"][-1]["capabilities"]["readback_path"] == PINNED_COPY


# -- other machines ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["seed-windows-gfx1151", "linux-rocm-apu", "h200"])
def test_stored_machines_match_the_policy(name):
    """The machine files hold facts; their capabilities must be what the real policy derives today."""
    report = machine(name)
    for p in report.probes:
        if p.available:
            assert p.capabilities.to_dict() == derive(p.facts).to_dict()


def test_seed_windows_gfx1151_says_why_device_memory_is_not_host_addressable():
    report = machine("seed-windows-gfx1151")
    md = to_markdown(report)
    assert report.selected_backend == "ctypes-hip" and report.readback_path == PINNED_COPY
    assert "device memory not host-addressable: pageable memory access = 0" in md
    assert "integrated GPU" in md
    assert "| pageable_memory_access | 0 |" in md and "| integrated | 1 |" in md
    assert "- Readback path: **pinned D2H copy**" in md


def test_linux_apu_with_pageable_access_is_host_addressable_yet_copies():
    md = to_markdown(machine("linux-rocm-apu"))
    assert "device memory host-addressable: proven" in md and "| pageable_memory_access | 1 |" in md
    assert "- device memory host-addressable: **yes**" in md
    assert "- Readback path: **pinned D2H copy**" in md    # no zero-copy implemented: the copy stays


def test_the_report_recorded_on_the_h200_reopens_and_renders():
    """`python -m engine.diagnostics --self-test --json` as it ran on the device (cuda-python 13.3.1)."""
    report = machine("h200-recorded")
    cuda = report.probe_for("cuda-python")
    assert cuda.facts.name == "NVIDIA H200" and cuda.facts.total_memory == 150109880320
    assert cuda.capabilities.to_dict() == derive(cuda.facts).to_dict()
    assert report.selected_backend == "cuda-python" and report.async_scheduling
    assert report.self_test.passed and report.self_test.readback.mismatches == 0
    md = to_markdown(report)
    assert "**cuda-python: PASSED**" in md and "| arch | sm_90 |" in md
    assert "GPU vs CPU logits: NOT RUN: no model loaded" in md


def test_the_kv_cache_type_in_use_is_saved_and_an_older_report_without_it_still_opens():
    """The app records the loaded model's KV cache type (what its Diagnostics view shows) in the report it saves;
    reports saved before the field existed, and reports of no loaded model, say nothing about it."""
    older = machine("h200-recorded")
    assert "kv_cache_type" not in json.loads((MACHINES / "h200-recorded.json").read_text(encoding="utf-8"))
    assert older.kv_cache_type == "" and "KV cache" not in to_markdown(older)
    older.kv_cache_type = "f16"
    again = DiagnosticsReport.from_json(older.to_json())
    assert again.kv_cache_type == "f16" and json.loads(older.to_json())["kv_cache_type"] == "f16"
    in_use = to_markdown(again).split("## In use")[1].split("##")[0]
    assert "- KV cache: **f16** (the loaded model's)" in in_use


def test_h200_facts_as_recorded():
    report = machine("h200")
    md = to_markdown(report)
    assert report.selected_backend == "cuda-python"
    for text in ("| device | NVIDIA H200 |", "| arch | sm_90 |", "| kind | discrete |", "150,109,880,320 bytes",
                 "| runtime version | 13030 |", "| driver version | 13000 |", "| pageable_memory_access | 0 |",
                 "| concurrent_managed_access | 1 |", "| managed memory host read (child process) | passed |",
                 "| device memory host read (child process) | failed: the child died with signal 11 SIGSEGV",
                 "500 steps x 8 ids, 0 mismatches; 43.67 us/step median"):
        assert text in md, text


# -- decisions ---------------------------------------------------------------------------------------
def test_async_decision_follows_the_capability_setting_and_environment():
    seed = machine("seed-windows-gfx1151").probe_for("ctypes-hip")
    on, why = async_scheduling_decision(seed, True, env={})
    assert on and "safe async" in why
    off, why = async_scheduling_decision(seed, True, env={ASYNC_ENV: "0"})
    assert not off and f"{ASYNC_ENV}=0" in why
    off, why = async_scheduling_decision(seed, False, env={})
    assert not off and "Settings" in why


def test_async_decision_never_turns_on_without_a_safe_readback():
    facts = machine("seed-windows-gfx1151").probe_for("ctypes-hip").facts
    facts.implements_pinned_staging = False          # the original bug's backend: no safe readback code
    no_readback = ProbeResult("ctypes-hip", True, "gfx1151", facts, derive(facts))
    on, why = async_scheduling_decision(no_readback, True, env={ASYNC_ENV: "1"})
    assert not on and "no safe async sampled-token readback" in why
    on, why = async_scheduling_decision(ProbeResult("cuda-python", False, "driver too old"), True, env={})
    assert not on and "driver too old" in why
    assert async_scheduling_decision(None, True, env={})[0] is False


def test_backend_selection_by_setting():
    seed = machine("seed-windows-gfx1151")
    assert select_backend(seed.probes, "hip")[0].backend == "ctypes-hip"
    assert select_backend(seed.probes, "cpu")[0].backend == "cpu"
    none, why = select_backend(seed.probes, "cuda")
    assert none is None and "cuda-python: cuda-python not installed" in why and "ctypes-cuda" in why
    assert select_backend(seed.probes, "tpu")[0] is None
    report = DiagnosticsReport.from_dict({**seed.to_dict(), "backend_setting": "cuda"})
    diagnostics.apply_selection(report, env={})
    assert report.selected_backend is None and report.readback_path == "none" and not report.async_scheduling


# -- self-test runner --------------------------------------------------------------------------------
def test_self_test_of_an_unavailable_backend_fails_with_the_reason():
    unavailable = next((p for p in collect().probes if not p.available), None)
    if unavailable is None:
        pytest.skip("every backend is available here")
    run = run_self_test(unavailable.backend)
    assert not run.passed and run.readback.error.startswith("backend unavailable: ")
    assert unavailable.reason.split(" (")[0] in run.readback.error


def test_self_test_of_an_unknown_backend_fails_by_name():
    run = run_self_test("vulkan")
    assert not run.passed and "unknown backend 'vulkan'" in run.readback.error


def test_logits_check_is_not_run_on_the_cpu_or_without_the_gpu_forward(tmp_path):
    run = run_self_test("cpu", model_path=tmp_path / "model.gguf")
    assert run.passed and run.logits.passed is None and "the CPU" in run.logits.reason
    check = compare_logits("cuda-python", tmp_path / "model.gguf")
    try:
        import engine.gpu  # noqa: F401
    except ModuleNotFoundError:
        assert check.passed is None and check.reason.startswith("GPU forward not available")


def test_logits_judge_on_real_vectors():
    rng = np.random.default_rng(0)
    cpu = rng.normal(size=1000).astype(np.float32)
    same = judge(LogitsCheck(False, ""), cpu, cpu + 0.01)
    assert same.passed and same.top5_overlap == 5 and same.max_abs_diff == pytest.approx(0.01, abs=1e-4)
    swapped = cpu.copy()
    swapped[np.argmin(cpu)] = cpu.max() + 5                    # a wrong token wins on the "GPU"
    bad = judge(LogitsCheck(False, ""), cpu, swapped)
    assert bad.passed is False and "not in the CPU's top-3" in bad.reason
    nan = judge(LogitsCheck(False, ""), cpu, np.full_like(cpu, np.nan))
    assert nan.passed is False and "not finite" in nan.reason


# -- command line ------------------------------------------------------------------------------------
def test_cli_prints_markdown_and_json(capsys):
    assert diagnostics.main(["--self-test"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Halo Chat diagnostics") and "## Self-test" in out
    assert diagnostics.main(["--json", "--backend", "cpu", "--no-async"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["selected_backend"] == "cpu" and data["async_scheduling"] is False
    assert "Settings" in data["async_reason"]
