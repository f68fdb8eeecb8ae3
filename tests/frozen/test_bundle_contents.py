"""What goes into the bundle is computed from the backend registry and the kernel folder (no build)."""
from __future__ import annotations

import pytest

from engine.backends import registry
from installer import build, bundle_contents


def test_every_registry_module_is_a_hidden_import():
    hidden = set(bundle_contents.hidden_imports())
    for spec in registry.BACKENDS.values():
        assert spec.module in hidden
        if spec.binding_module:
            assert spec.binding_module in hidden
    assert set(registry.hidden_imports()) <= hidden


def test_a_new_backend_lands_in_the_bundle_without_touching_the_spec(monkeypatch):
    new = registry.BackendSpec("vulkan-someday", "engine.backends.vulkan_someday",
                               "engine.backends.runtime.vulkan_someday", "VulkanRuntime")
    monkeypatch.setitem(registry.BACKENDS, new.name, new)
    hidden = bundle_contents.hidden_imports()
    assert "engine.backends.vulkan_someday" in hidden and "engine.backends.runtime.vulkan_someday" in hidden
    with pytest.raises(SystemExit, match="vulkan_someday"):
        bundle_contents.check_analysis([m for m in hidden if "vulkan" not in m])


def test_hip_python_compiled_submodules_are_collected_when_installed():
    hidden = bundle_contents.hidden_imports()
    if not bundle_contents.installed("rocm.bindings"):
        assert not any(m.startswith("rocm.") for m in hidden)
        pytest.skip("hip-python is not installed here")
    for needed in ("rocm.bindings", "rocm.bindings.util", "rocm.bindings.hip", "rocm.bindings.hiprtc",
                   "rocm.bindings.cyhip", "rocm.bindings.util.types"):
        assert needed in hidden


def test_every_kernel_source_is_a_data_file(tmp_path):
    version_file = bundle_contents.write_version_file(tmp_path)
    datas = bundle_contents.datas(version_file)
    kernels = {p.name for p in (bundle_contents.ROOT / "engine" / "backends" / "kernels").glob("*.cu")}
    assert kernels, "no kernel sources found"
    bundled = {src.rsplit("/", 1)[-1] for src, dest in datas if dest == "engine/backends/kernels"}
    assert kernels <= bundled
    assert (str(bundle_contents.ICON), "assets/icons") in datas
    assert version_file.read_text().strip() == bundle_contents.version()


def test_prebuilt_objects_are_data_files_when_built(tmp_path):
    from engine.backends.kernels.prebuilt import load_manifest

    manifest = load_manifest()
    if manifest is None:
        pytest.skip("no prebuilt kernels here (python -m engine.backends.kernels.build)")
    datas = bundle_contents.datas(bundle_contents.write_version_file(tmp_path))
    for o in manifest.objects:
        assert (str(o.path), f"engine/backends/kernels/prebuilt/{o.target}") in datas
    assert (str(manifest.root / "manifest.json"), "engine/backends/kernels/prebuilt") in datas


def test_heavy_and_test_only_packages_are_excluded():
    for name in ("torch", "pytest", "_pytest", "hypothesis", "pytestqt", "tests", "PyInstaller"):
        assert name in bundle_contents.EXCLUDES


@pytest.mark.parametrize("version, quad", [("0.1.0", "0.1.0.0"), ("1.2", "1.2.0.0"), ("2.0.1rc3", "2.0.1.3"),
                                           ("1.2.3.4.5", "1.2.3.4")])
def test_version_quad_for_nsis(version, quad):
    assert build.version_quad(version) == quad


def test_every_engine_module_is_bundled_even_if_imported_lazily():
    hidden = set(bundle_contents.hidden_imports())
    engine_dir = bundle_contents.ROOT / "engine"
    for path in engine_dir.rglob("*.py"):
        parts = path.relative_to(bundle_contents.ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name.endswith("__main__"):
            continue
        assert name in hidden, name


def test_a_release_bundle_is_refused_without_the_prebuilt_kernels(tmp_path, monkeypatch, capsys):
    """Without the code objects a stock Windows driver (no hiprtc) never reaches the GPU: the real installer
    refuses to build; a Linux script check says so and goes on."""
    from engine.backends.kernels import prebuilt

    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", tmp_path / "nothing-built")
    with pytest.raises(SystemExit, match="no prebuilt HIP kernels"):
        build.check_prebuilt_kernels(required=True)
    build.check_prebuilt_kernels(required=False)
    assert "WARNING: there are no prebuilt HIP kernels" in capsys.readouterr().err
