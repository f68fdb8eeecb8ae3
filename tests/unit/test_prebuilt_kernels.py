"""The ahead-of-time HIP code objects (python -m engine.backends.kernels.build): current with the sources,
checked with llvm-readelf, and their AMDGPU metadata (kernel names, argument sizes) matching the arguments
the engine really passes at launch. Skipped where nothing was built, unless HALO_REQUIRE_PREBUILT=1 (CI,
which builds first): there a missing or stale object fails."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import engine.gpu.forward as fwd_mod
from engine.backends import kernels, registry
from engine.backends.base import DeviceBuffer, Kernel
from engine.backends.kernels.build import CODE_OBJECT_VERSION
from engine.backends.kernels.objcheck import KernelArg, KernelInfo, ObjectInfo, problems, read_object
from engine.backends.kernels.prebuilt import TARGETS, load_manifest
from engine.backends.selftest import run_self_test
from engine.gpu.model import GpuModel

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
# qkv bias (qwen2), q/k norms (qwen3), post norms + sliding window (gemma3), plain (llama), hybrid (qwen35: T = 20
# takes the chunked delta rule too), MoE with biases, sinks, YaRN and MXFP4 experts (gpt-oss)
GPU_MODELS = ("tiny-qwen3-q4_k_m.gguf", "tiny-qwen2-q8_0.gguf", "tiny-gemma3-q4_k_m.gguf", "tiny-llama-q4_1.gguf",
              "tiny-qwen35-q8_0.gguf", "tiny-gptoss-q8_0.gguf")


@pytest.fixture(scope="module")
def manifest():
    m = load_manifest()
    if m is None:
        if os.environ.get("HALO_REQUIRE_PREBUILT") == "1":
            pytest.fail("no prebuilt kernels: python -m engine.backends.kernels.build did not run")
        pytest.skip("no prebuilt kernels here (python -m engine.backends.kernels.build)")
    if shutil.which("llvm-readelf-19") is None:
        pytest.skip("llvm-readelf-19 not installed")
    return m


@pytest.fixture(scope="module")
def infos(manifest):
    return {(o.target, o.kernel_set): read_object(o.path) for o in manifest.objects}


def test_one_current_object_per_target_and_kernel_file(manifest):
    """A kernel source edited without rebuilding fails here (its hash no longer matches)."""
    assert {(o.target, o.kernel_set) for o in manifest.objects} == \
        {(t, f) for t in TARGETS for f in kernels.kernel_files()}
    for o in manifest.objects:
        assert o.current(), \
            f"{o.kernel_set} changed since {o.target}'s object was built: rerun the build"
    assert manifest.code_object_version == CODE_OBJECT_VERSION and manifest.compiler.startswith("clang 19")


def test_every_object_passes_the_checks(manifest, infos):
    for o in manifest.objects:
        assert problems(infos[(o.target, o.kernel_set)], o.target, list(o.kernels), CODE_OBJECT_VERSION) == []
        assert len(o.kernels) > 0


def test_the_checks_catch_wrong_arch_missing_kernels_and_undefined_symbols(manifest, infos):
    info = infos[("gfx1151", "selftest.cu")]
    assert problems(info, "gfx1151", ["halo_write_ids", "halo_add_f32"], CODE_OBJECT_VERSION) == []
    found = problems(info, "gfx1100", ["halo_write_ids", "halo_gone"], 4)
    assert any("amdgcn-amd-amdhsa--gfx1151" in p and "gfx1100" in p for p in found)
    assert any("halo_gone missing from the metadata" in p for p in found)
    assert any("code object v5, expected v4" in p for p in found)
    undefined = ObjectInfo(info.target, info.code_object_version, info.kernels, info.defined_symbols,
                           frozenset({"__ocml_exp_f32"}))
    assert problems(undefined, "gfx1151", [], CODE_OBJECT_VERSION) == ["undefined symbols: __ocml_exp_f32"]


# --- the engine's launches against the objects' metadata ------------------------------------------------------
def _recorded_launches(monkeypatch) -> list[tuple[str, str, tuple]]:
    """(file, kernel, args) of every launch of the GPU forward on tiny models of each layer layout (decode,
    small and large prefill, legacy tiles, tensor-core tiles, with sampling) and of the self-test, recorded on
    the CPU backend."""
    backend = registry.create("cpu")
    launched = []
    monkeypatch.setenv("HALO_DELTA_CHUNKED", "1")         # the opt-in chunked delta rule launches too
    backend.kernel = lambda file, function: Kernel(function, file)
    backend.launch = lambda k, grid, block, args, stream, shared_bytes=0: launched.append((k.handle, k.name, args))
    for model in GPU_MODELS:
        m = GpuModel.load(DATA / model, backend, max_tokens=32, max_seqs=4, kv_blocks=4)
        kv = m.new_kv_cache(4, 16)
        m.fwd.ts_min_context = 0                           # the SIMT prefill tile at any length (nothing uploaded)
        try:
            for legacy in (False, True):
                monkeypatch.setattr(fwd_mod, "LEGACY_TILES", legacy)
                for T in (1, 3, 8, 20):
                    m.fwd.enqueue_body(kv, T, 1, True, False)
            monkeypatch.setattr(fwd_mod, "LEGACY_TILES", False)
            own_ts, m.fwd.ts = m.fwd.ts, False             # HALO_GPU_FLASH=0: the untiled prefill attention
            m.fwd.enqueue_body(kv, 20, 1, True, False)
            m.fwd.ts = own_ts
            # the CUDA tensor-core kernels too (their HIP objects are empty but keep the signature), and the
            # opt-in RDNA WMMA tile, where the shapes allow
            m.fwd.use_tc, m.fwd.flash = True, fwd_mod.flash_usable(m.config)
            for tile in ("auto", "tck", "tch", "tch128"):  # the tiny products stay on tc unless the pipelined
                monkeypatch.setattr(fwd_mod, "TC_TILE", "tch" if tile == "tch128" else tile)   # tiles are asked for
                monkeypatch.setattr(fwd_mod, "TCH_WIDE_MIN_T", 1 if tile == "tch128" else 1 << 30)
                m.fwd.enqueue_body(kv, 20, 1, True, False)
            m.fwd.use_tc, m.fwd.flash, m.fwd.use_wmma = False, False, True
            m.fwd.enqueue_body(kv, 20, 1, True, False)
        finally:
            kv.free()
            m.close()
    run_self_test(backend, steps=1)          # its outcome does not matter here: only what it launched
    return launched


def mismatches(kernel: KernelInfo, args: tuple) -> list[str]:
    """How the engine's arguments differ from what the kernel reads: count, pointer-ness, byte width (each
    value sits in its own 8-byte slot and the runtime copies `size` bytes of it)."""
    if len(args) != len(kernel.args):
        return [f"{kernel.name}: {len(args)} arguments passed, the kernel takes {len(kernel.args)}"]
    found = []
    for i, (a, k) in enumerate(zip(args, kernel.args, strict=True)):
        pointer = isinstance(a, DeviceBuffer) or (isinstance(a, np.uint64) and int(a) == 0)   # NULL
        width = 8 if pointer else np.asarray(a).itemsize
        if pointer != (k.value_kind == "global_buffer") or width != k.size:
            found.append(f"{kernel.name} argument {i}: engine passes {type(a).__name__} ({width} bytes), "
                         f"kernel reads {k.value_kind} of {k.size}")
    return found


def test_engine_launch_arguments_match_every_objects_metadata(manifest, infos, monkeypatch):
    launches = _recorded_launches(monkeypatch)
    names = {n for _, n, _ in launches}
    assert {"halo_embed_norm", "halo_rope_kv", "halo_attention", "halo_add_norm", "halo_sample",
            "halo_matmul_mv_t1", "halo_glu_mv_t1", "halo_matmul_gt", "halo_matmul_r1_t1", "halo_write_ids",
            "halo_kv_split", "halo_attention_tc_split", "halo_matmul_tc", "halo_glu_tc", "halo_matmul_tcp",
            "halo_matmul_tck", "halo_glu_tck",
            "halo_matmul_tch", "halo_glu_tch", "halo_split_f16", "halo_matmul_tch128", "halo_glu_tch128",
            "halo_matmul_wm", "halo_glu_wm"} <= names
    assert any(n.startswith("halo_attention_ts_d") for n in names)     # HIP's prefill attention (the SIMT tile)
    assert {"halo_conv_silu", "halo_delta_prep", "halo_delta_rule", "halo_delta_chunked", "halo_gated_norm",
            "halo_output_gate", "halo_split_q_gate"} <= names
    for target in TARGETS:
        for file, name, args in launches:
            kernel = infos[(target, file)].kernels.get(name)
            assert kernel is not None, f"{name} is launched but missing from {target}/{file}"
            assert mismatches(kernel, args) == []
        # bq_t16 takes kq_t1's arguments (the host passes the same tuple; the matmul adds its split-K slice and
        # partial-sums buffer); the tiny models' K never selects it
        quant = infos[(target, "halo_quant.cu")].kernels
        assert quant["halo_glu_bq_t16"].args == quant["halo_glu_kq_t1"].args
        bq, kq = quant["halo_matmul_bq_t16"].args, quant["halo_matmul_kq_t1"].args
        assert bq[:len(kq)] == kq and [(a.size, a.value_kind) for a in bq[len(kq):]] == [
            (4, "by_value"), (8, "global_buffer")]
        # tn_t8 / tn_t16 (CUDA only, empty here) take the same tuple plus their K slice and partial sums, GLU too
        for n in (8, 16):
            assert quant[f"halo_matmul_tn_t{n}"].args == bq
            glu, glu_kq = quant[f"halo_glu_tn_t{n}"].args, quant["halo_glu_kq_t1"].args
            assert glu[:len(glu_kq)] == glu_kq and [(a.size, a.value_kind) for a in glu[len(glu_kq):]] == [
                (4, "by_value"), (8, "global_buffer")]


def test_the_comparison_catches_a_changed_signature(manifest, infos):
    kernel = infos[("gfx1151", "selftest.cu")].kernels["halo_write_ids"]
    backend = registry.create("cpu")
    buf = backend.alloc(8, np.int32)
    assert mismatches(kernel, (buf, np.int32(8), np.int32(1))) == []
    assert "2 arguments passed" in mismatches(kernel, (buf, np.int32(8)))[0]
    assert "argument 2" in mismatches(kernel, (buf, np.int32(8), np.int64(1)))[0]
    assert "argument 1" in mismatches(kernel, (buf, buf, np.int32(1)))[0]
    assert kernel.args == (KernelArg(0, 8, "global_buffer"), KernelArg(8, 4, "by_value"), KernelArg(12, 4, "by_value"))


def test_isa_version_numbers_match_the_device_libraries_naming():
    from engine.backends.kernels.build import isa_version
    # Debian's own files: oclc_isa_version_1030.bc holds 10300, _906 holds 9006; gfx90a is hex stepping
    assert [isa_version(t) for t in ("gfx1030", "gfx906", "gfx90a", "gfx1151", "gfx1100", "gfx1201")] == \
        [10300, 9006, 9010, 11501, 11000, 12001]
