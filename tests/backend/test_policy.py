"""The policy on a table of machines: facts in, capabilities out. Rows from docs/ORIGIN.md and the H200 run."""
from __future__ import annotations

import pytest

from engine.backends.facts import DeviceFacts, ProbeResult
from engine.backends.policy import NO_PATH, PINNED_COPY, ZERO_COPY, derive


def facts(**kw) -> DeviceFacts:
    base = dict(backend="ctypes-hip", api="hip", platform="win32", implements_pinned_staging=True)
    base.update(kw)
    return DeviceFacts(**base)


SEED_WINDOWS_GFX1151 = facts(name="AMD Radeon(TM) 8060S Graphics", arch="gfx1151", integrated=True,
                             pageable_memory_access=False, pageable_memory_access_uses_host_page_tables=False,
                             managed_memory=False, concurrent_managed_access=False, can_map_host_memory=True,
                             unified_addressing=True, managed_host_read="not run: the attributes already rule it out")
LINUX_ROCM_APU = facts(backend="hip-python", platform="linux", arch="gfx1151", integrated=True,
                       pageable_memory_access=True, pageable_memory_access_uses_host_page_tables=True,
                       managed_memory=True, concurrent_managed_access=True, can_map_host_memory=True,
                       unified_addressing=True, device_host_read="passed", managed_host_read="passed")
DISCRETE_AMD = facts(backend="hip-python", platform="linux", arch="gfx1100", integrated=False,
                     pageable_memory_access=False, managed_memory=True, concurrent_managed_access=False,
                     can_map_host_memory=True, unified_addressing=True,
                     managed_host_read="not run: the attributes already rule it out")
H200 = facts(backend="cuda-python", api="cuda", platform="linux", name="NVIDIA H200", arch="sm_90", integrated=False,
             pageable_memory_access=False, pageable_memory_access_uses_host_page_tables=False, managed_memory=True,
             concurrent_managed_access=True, can_map_host_memory=True, unified_addressing=True,
             device_host_read="failed: the child died with signal 11 SIGSEGV reading a plain device allocation",
             managed_host_read="passed")

#                         facts,                 unified, host-addressable, async readback, path
TABLE = [
    pytest.param(SEED_WINDOWS_GFX1151, False, False, True, PINNED_COPY, id="seed-windows-gfx1151"),
    pytest.param(LINUX_ROCM_APU, True, True, True, PINNED_COPY, id="linux-rocm-apu"),
    pytest.param(DISCRETE_AMD, False, False, True, PINNED_COPY, id="discrete-amd"),
    pytest.param(H200, True, False, True, PINNED_COPY, id="h200"),
]


@pytest.mark.parametrize("f, unified, addressable, readback, path", TABLE)
def test_policy_table(f, unified, addressable, readback, path):
    caps = derive(f)
    assert caps.unified_memory.value is unified
    assert caps.device_memory_host_addressable.value is addressable
    assert caps.async_sampled_token_readback.value is readback
    assert caps.readback_path == path
    for c in (caps.unified_memory, caps.device_memory_host_addressable, caps.async_sampled_token_readback):
        assert len(c.reason) > 20


def test_the_seed_machine_reasons_name_the_facts():
    caps = derive(SEED_WINDOWS_GFX1151)
    assert "pageable_memory_access=0" in caps.unified_memory.reason
    assert "integrated" in caps.unified_memory.reason      # says why integration does not count
    assert "not proven" in caps.readback_reason


def test_attributes_alone_never_prove_host_addressability():
    for outcome in ("not run: disabled by the caller", "failed: the child died with signal 11 SIGSEGV"):
        caps = derive(facts(**{**LINUX_ROCM_APU.to_dict(), "device_host_read": outcome}))
        assert caps.unified_memory.value and not caps.device_memory_host_addressable.value
        assert outcome in caps.device_memory_host_addressable.reason


def test_a_managed_memory_read_does_not_prove_the_engines_plain_allocations_readable():
    """The H200 case: managed memory reads back on the host, a cudaMalloc pointer segfaults the reader. The
    engine's buffers are plain allocations, so only that read decides; the managed one is reported beside it."""
    caps = derive(H200)
    assert not caps.device_memory_host_addressable.value
    reason = caps.device_memory_host_addressable.reason
    assert "plain device allocation" in reason and "SIGSEGV" in reason and "managed memory, which the engine does not use" in reason
    flipped = derive(facts(**{**LINUX_ROCM_APU.to_dict(), "managed_host_read": "failed: host read wrong bytes"}))
    assert flipped.device_memory_host_addressable.value      # the plain-allocation read passed there


def test_unknown_attributes_count_as_no():
    caps = derive(facts(integrated=True))       # every attribute query failed
    assert not caps.unified_memory.value and "unknown" in caps.unified_memory.reason
    assert not caps.device_memory_host_addressable.value


def test_a_missing_implementation_is_false():
    caps = derive(facts(**{**H200.to_dict(), "implements_pinned_staging": False}))
    assert caps.async_sampled_token_readback.value is False and caps.readback_path == NO_PATH


def test_zero_copy_only_when_proven_and_implemented():
    assert derive(facts(**{**LINUX_ROCM_APU.to_dict(), "implements_zero_copy": True})).readback_path == ZERO_COPY
    assert derive(facts(**{**H200.to_dict(), "implements_zero_copy": True})).readback_path == PINNED_COPY
    assert derive(facts(**{**SEED_WINDOWS_GFX1151.to_dict(), "implements_zero_copy": True})).readback_path == PINNED_COPY


def test_probe_results_round_trip_through_dicts():
    import json
    r = ProbeResult("cuda-python", True, "NVIDIA H200", H200, derive(H200))
    again = ProbeResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r and again.facts.arch == "sm_90" and again.capabilities.readback_path == PINNED_COPY
    missing = ProbeResult.from_dict({"backend": "ctypes-hip", "available": False, "reason": "amdhip64_7.dll not found"})
    assert missing.facts is None and "FAIL ctypes-hip" in missing.summary_line()
