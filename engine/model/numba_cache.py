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
