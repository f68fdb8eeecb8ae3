"""Shared plumbing for the two Python bindings (cuda-python, hip-python) whose calls return `(status, *values)`."""
from __future__ import annotations

from pathlib import Path

from ...errors import KernelCompileError
from .binding import RuntimeBinding
from .discovery import path_from_maps
from .status import make_error


def as_text(value) -> str:
    """Error names come back as bytes, str, or `(status, bytes)` depending on the binding's version."""
    if isinstance(value, tuple):
        value = value[-1]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode(errors="replace")
    return str(value)


def mapped(soname: str) -> str | None:
    return path_from_maps(Path("/proc/self/maps"), soname)


class TupleBinding(RuntimeBinding):
    def _error_name(self, status) -> str: ...
    def _error_text(self, status) -> str: ...

    def check(self, status, what: str) -> None:
        if int(status) == 0:
            return
        raise make_error(what, int(status), self._error_name(status), self._error_text(status))

    def _unwrap(self, result, what: str):
        """`(status,)` -> None, `(status, v)` -> v, `(status, a, b)` -> (a, b); raises on a failed status."""
        if not isinstance(result, tuple):
            result = (result,)
        self.check(result[0], what)
        rest = result[1:]
        return None if not rest else rest[0] if len(rest) == 1 else rest

    def _compile_with(self, rtc, prefix: str, code_fns: tuple[str, str], source: str, filename: str,
                      options: list[str]) -> bytes:
        """nvrtc and hiprtc are the same API under two prefixes; both return `(status, ...)` tuples here."""
        def call(fn, *args):
            return getattr(rtc, prefix + fn)(*args)

        def text(status) -> str:
            return as_text(call("GetErrorString", status))

        status, prog = call("CreateProgram", source.encode(), filename.encode(), 0, [], [])
        if int(status):
            raise KernelCompileError(f"{prefix}CreateProgram failed: {text(status)}")
        try:
            opts = [o.encode() for o in options]
            (status, *_) = call("CompileProgram", prog, len(opts), opts)
            _, size = call("GetProgramLogSize", prog)
            log = b" " * max(int(size), 1)
            call("GetProgramLog", prog, log)
            if int(status):
                raise KernelCompileError(f"{filename}: {text(status)} (options {' '.join(options)})",
                                         log.rstrip(b"\x00 ").decode(errors="replace"))
            status, size = call(code_fns[0], prog)
            code = b" " * int(size)
            (status, *_) = call(code_fns[1], prog, code)
            if int(status):
                raise KernelCompileError(f"{prefix}{code_fns[1]} failed: {text(status)}")
            return code
        finally:
            call("DestroyProgram", prog)
