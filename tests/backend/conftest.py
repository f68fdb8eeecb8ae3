"""Backend tests run over every backend the probe finds available (here: cpu; on the H200 also
cuda-python and ctypes-cuda). Kernel caches go to a temporary folder so runs do not share state."""
from __future__ import annotations

import pytest

from engine.backends import registry
from engine.backends.probe import probe

_AVAILABLE: list[str] | None = None


def available_backends() -> list[str]:
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = [n for n in registry.BACKENDS if probe(n, host_read_checks=False).available]
    return _AVAILABLE


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        names = available_backends()
        marks = {n: [pytest.mark.gpu] if registry.BACKENDS[n].binding_module else [] for n in names}
        metafunc.parametrize("backend_name", [pytest.param(n, marks=marks[n], id=n) for n in names],
                             scope="module")


@pytest.fixture(scope="module")
def backend(backend_name, tmp_path_factory):
    import os
    before = os.environ.get("HALO_CACHE_DIR")
    os.environ["HALO_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    b = registry.create(backend_name)
    yield b
    b.close()
    if before is None:
        os.environ.pop("HALO_CACHE_DIR", None)
    else:
        os.environ["HALO_CACHE_DIR"] = before
