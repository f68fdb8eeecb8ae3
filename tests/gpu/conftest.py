"""GPU tests: every GPU backend the probe finds; all skip cleanly on a machine without a GPU."""
from __future__ import annotations

import pytest

from engine.backends import registry
from engine.backends.probe import probe

GPU_BACKENDS = [n for n, s in registry.BACKENDS.items() if s.binding_module]
_found: dict[str, object] = {}


def gpu_probe(name: str):
    if name not in _found:
        _found[name] = probe(name, host_read_checks=True)
    return _found[name]


@pytest.fixture(params=GPU_BACKENDS, scope="module")
def gpu_name(request, tmp_path_factory):
    import os
    result = gpu_probe(request.param)
    if not result.available:
        pytest.skip(f"{request.param}: {result.reason}")
    before = os.environ.get("HALO_CACHE_DIR")
    os.environ["HALO_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield request.param
    if before is None:
        os.environ.pop("HALO_CACHE_DIR", None)
    else:
        os.environ["HALO_CACHE_DIR"] = before


@pytest.fixture(scope="module")
def backend(gpu_name):
    """A GPU backend of `gpu_name`, one per test module."""
    b = registry.create(gpu_name)
    yield b
    b.close()

