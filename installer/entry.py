"""The frozen app's entry point (PyInstaller runs this file as __main__).

    HaloChat [app options]                 the chat window (app.__main__.main)
    HaloChat --self-test [self-test opts]  no window: app.self_test.main (see its docstring)
    HaloChat --forget-secrets              no window: remove what the app saved in the OS keyring (the
                                           uninstaller's purge runs it, installer/nsis/uninstall.nsh)
    HaloChat -m MODULE [args]              a child-process module the engine starts with
                                           `sys.executable -m` (CHILD_MODULES only), as python would

Logging (log folder + faulthandler on all threads) is set up before anything else is imported, so even
an import-time fault in Qt or a runtime binding leaves a trace in the user's log folder.

Benchmark hook: with HALO_STARTUP_BENCH=<file> in the environment, the app quits as soon as its first
top-level window is visible and exposed, after writing "<entry wall time> <window wall time>" (seconds
since the epoch) to <file>. installer/bench_startup.py uses it; nothing else does.
"""
from __future__ import annotations

import os
import sys
import time

ENTRY_TIME = time.time()

# Modules the engine runs as `sys.executable -m MODULE ...` children; in the bundle sys.executable is this
# program, so it must run them the way `python -m` does. Nothing else is accepted.
CHILD_MODULES = ("engine.template_worker", "engine.backends.host_read_check")
FORGET_SECRETS = "--forget-secrets"        # the uninstaller's purge runs it (build.py passes it to NSIS)


def run_child_module(argv: list[str]) -> int:
    """`-m MODULE args...`: run MODULE as __main__ with sys.argv = [MODULE, *args], like `python -m`."""
    import runpy

    module = argv[1] if len(argv) > 1 else ""
    if module not in CHILD_MODULES:
        print(f"HaloChat: -m {module[:80]!r} is not a module this program runs", file=sys.stderr)
        return 2
    sys.argv = [module, *argv[2:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _give_streams()
    if argv[:1] == ["-m"]:
        return run_child_module(argv)      # before logging setup: a child must not touch the app's logs
    if argv == [FORGET_SECRETS]:
        return forget_secrets()            # no logging setup either: the purge deletes the log folder next
    import multiprocessing
    multiprocessing.freeze_support()
    from app.logging_setup import setup_logging
    setup_logging()
    if "--self-test" in argv:
        argv.remove("--self-test")
        from app import self_test
        return self_test.main(argv)
    import app.__main__ as app_main
    bench_file = os.environ.get("HALO_STARTUP_BENCH")
    if bench_file:
        app_main.QApplication = _startup_probe_class(app_main.QApplication, bench_file)
    return app_main.main(argv)


def forget_secrets() -> int:
    """Forgets the secrets the app keeps in the OS keyring (Windows Credential Manager), which the purge's
    removal of the data and settings folders would leave behind: the hub token and the key of every server the
    settings list (read before the uninstaller deletes them). Through keyring: it knows their names there."""
    from app.remote_models import forget_server_keys
    from app.settings import AppSettings
    from engine.keychain import HUB_TOKEN_ACCOUNT, forget_secret

    forget_secret(HUB_TOKEN_ACCOUNT)
    forget_server_keys(AppSettings().q)
    return 0


def _give_streams() -> None:
    """A windowed Windows build has sys.stdout/stderr = None unless the parent passed handles; argparse
    and print() then fail or vanish. Point them at the null device (the self-test also writes --report)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))   # noqa: SIM115 - process lifetime


def _startup_probe_class(base, bench_file: str):
    from PySide6.QtCore import QTimer

    class StartupProbeApplication(base):
        """Quits once a top-level window is visible and exposed (= usable), recording the time."""

        def exec(self):
            QTimer.singleShot(0, self._probe)
            return super().exec()

        def _probe(self):
            ready = [w for w in self.topLevelWidgets()
                     if w.isVisible() and w.windowHandle() is not None and w.windowHandle().isExposed()]
            if not ready:
                QTimer.singleShot(5, self._probe)
                return
            with open(bench_file, "w", encoding="utf-8") as f:
                f.write(f"{ENTRY_TIME:.6f} {time.time():.6f}\n")
            self.quit()

    return StartupProbeApplication


if __name__ == "__main__":
    sys.exit(main())
