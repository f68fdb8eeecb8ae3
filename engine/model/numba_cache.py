"""Reading numba's cached kernels without its whole implementation registry (~11 MiB resident).

Before it reads a cached kernel, numba refreshes the target context (numba.core.caching.Cache
.load_overload): that imports and installs every implementation numba has (linalg, random, typed
containers, jitclass, datetime, ...), which a compiled kernel never calls. A cached kernel needs only the
runtime (NRT: ours allocate scratch arrays). A kernel missing from the cache is compiled, and numba's
compiler refreshes both contexts itself (numba.core.compiler.CompilerBase), so a compile still sees
everything. Where numba's internals differ from what this expects, or the lean read fails, numba's own
path runs.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping


def lean_cache_loads(namespace: Mapping[str, object]) -> int:
    """Make each caching dispatcher (a compiled kernel) among a module's globals read its cache without the registry
    refresh; returns how many. A kernel module ends with `lean_cache_loads(globals())`."""
    try:
        from numba.core.dispatcher import Dispatcher
        from numba.core.runtime import rtsys
    except ImportError:
        return 0
    done = 0
    for dispatcher in [v for v in namespace.values() if isinstance(v, Dispatcher)]:
        cache = getattr(dispatcher, "_cache", None)
        if not all(hasattr(cache, name) for name in ("load_overload", "_load_overload",
                                                     "_guard_against_spurious_io_errors")):
            continue                                   # no disk cache (NullCache), or another numba
        cache.load_overload = _lean_load(cache, cache.load_overload, rtsys)
        done += 1
    return done


def _lean_load(cache, numbas_own, rtsys):
    def load_overload(sig, target_context):
        try:
            rtsys.initialize(target_context)           # what the refresh did that cached code needs
            with cache._guard_against_spurious_io_errors():
                return cache._load_overload(sig, target_context)   # None: not cached, numba compiles
        except Exception:   # noqa: BLE001 - numba's own load (with the refresh) decides then
            return numbas_own(sig, target_context)
    return load_overload


def keep_frozen_cache_in_cache_dir() -> bool:
    """In a frozen app (PyInstaller), cache kernels under NUMBA_CACHE_DIR like a source install; True when done.

    numba's own locators need the module's source file, which a bundle has not (PyInstaller keeps the file name
    relative, e.g. engine/model/quant_kernels.py), so numba fell back to its user-wide folder keyed by the absolute
    form of that name: a new cache for every working directory the app was started from, outside the app's cache
    folder (which the uninstaller's purge removes). This locator keys the cache by that relative name and stamps it
    with the executable (numba's mixin does for frozen apps), so an updated app compiles once. Call it before the
    kernels are decorated."""
    if not getattr(sys, "frozen", False):
        return False
    try:
        from numba.core import config
        from numba.core.caching import CacheImpl, _CacheLocator, _SourceFileBackedLocatorMixin
    except ImportError:
        return False

    class FrozenAppLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(config.CACHE_DIR, py_file.replace("\\", "/").replace("/", "_"))

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if not config.CACHE_DIR or os.path.isabs(py_file):
                return None               # a real path: numba's own locators serve it
            locator = cls(py_func, py_file)
            try:
                locator.ensure_cache_path()
            except OSError:
                return None
            return locator

    if not any(k.__name__ == FrozenAppLocator.__name__ for k in CacheImpl._locator_classes):
        CacheImpl._locator_classes.insert(0, FrozenAppLocator)
    return True
