"""`HaloChat --self-test [--model PATH] [--report FILE] [--strict]`: check an installed (or frozen) Halo
Chat without opening a window, and print a report. Exit code 0 only if every check passed.

Checks, in order (each one is PASS, FAIL or SKIP with a reason):
  logging      the log folder exists and faulthandler is armed for all threads
  qt           an offscreen QApplication starts, the theme's stylesheets and the icon load (bundled assets)
  model        the model file exists (default: the starter model in the models folder)
  generate     load the model on the engine's best backend and generate a few greedy tokens
  generate-cpu the same on the CPU, when the best backend was not the CPU (SKIP when it was: covered)
  diagnostics  the engine's diagnostics with its self-test (engine.diagnostics.collect: every backend
               probed and self-tested, the selected one's readback, GPU-vs-CPU logits on a GPU)

The app never imports a backend: the backend self-test is reached through engine.diagnostics.
SKIP means "not applicable here" (the CPU run when the engine already chose the CPU); --strict fails it.
Windowed Windows builds have no stdout, so `--report FILE` also writes the report to a file.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PROMPT = "Say hello in one short sentence."
log = logging.getLogger("halo.self_test")


@dataclass
class Check:
    name: str
    status: str           # "PASS" | "FAIL" | "SKIP"
    detail: str
    seconds: float = 0.0
    extra: str = ""       # a multi-line block printed under the check (the diagnostics report)

    def line(self) -> str:
        return f"{self.status:4}  {self.name:<12} {self.seconds:7.2f} s  {self.detail}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="HaloChat --self-test", description="check Halo Chat without a window")
    p.add_argument("--model", help="GGUF file to test with (default: the starter model in the models folder)")
    p.add_argument("--max-tokens", type=int, default=8, help="tokens to generate per backend")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per load and per generation")
    p.add_argument("--report", help="also write the report to this file")
    p.add_argument("--strict", action="store_true", help="a skipped check (missing engine feature) fails")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ["QT_QPA_PLATFORM"] = "offscreen"     # no window, and no desktop session needed
    started = time.perf_counter()
    checks = [_timed("logging", check_logging), _timed("qt", check_qt)]
    model = _timed("model", lambda: check_model(args.model))
    checks.append(model)
    if model.status == "PASS":
        best = _timed("generate", lambda: check_generate(Path(model.detail), args, backend=None))
        checks.append(best)
        checks.append(_timed("generate-cpu", lambda: check_generate_cpu(Path(model.detail), args, best)))
    model_path = Path(model.detail) if model.status == "PASS" else None
    checks.append(_timed("diagnostics", lambda: check_diagnostics(model_path)))
    failed = [c for c in checks if c.status == "FAIL" or (args.strict and c.status == "SKIP")]
    text = render(checks, failed, time.perf_counter() - started)
    _emit(text, args.report)
    return 1 if failed else 0


# ---- checks: each returns a Check; an exception inside one becomes its FAIL ---------------------------
def check_logging() -> Check:
    from app.logging_setup import log_files, setup_logging

    files = log_files() or setup_logging()
    if files is None:
        return Check("logging", "FAIL", "no log folder could be created (log folder and temp folder)")
    if not faulthandler.is_enabled():
        return Check("logging", "FAIL", f"logs in {files.folder}, but faulthandler is not enabled")
    return Check("logging", "PASS", f"logs in {files.folder}; faulthandler on, all threads -> {files.crash.name}")


def check_qt() -> Check:
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.theme import apply_theme, assets_dir

    app = QApplication.instance() or QApplication(sys.argv[:1])
    colors = apply_theme(app, "dark")
    icon_path = assets_dir() / "icons" / "halo.ico"
    icon = QIcon(str(icon_path))
    if not colors or not app.styleSheet():
        return Check("qt", "FAIL", f"theme did not load from {assets_dir()}")
    if icon.isNull():
        return Check("qt", "FAIL", f"icon did not load: {icon_path}")
    return Check("qt", "PASS", f"Qt {_qt_version()} ({app.platformName()}), theme + icon from {assets_dir()}")


def check_model(path: str | None) -> Check:
    from engine import model_store

    found = Path(path) if path else model_store.find_local(model_store.STARTER)
    if found is None or not found.is_file():
        where = path or model_store.local_path(model_store.STARTER)
        return Check("model", "FAIL", f"no model at {where}; get the starter model with "
                                      f"`python -m engine fetch` or pass --model PATH")
    return Check("model", "PASS", str(found))


def check_generate(path: Path, args, backend: str | None) -> Check:
    """Loads `path` in a fresh Engine (the engine's own backend choice when `backend` is None) and
    generates `--max-tokens` greedy tokens. detail starts with the backend the engine reported."""
    from engine.api import ChatMessage, GenerateRequest, SamplingParams
    from engine.engine import Engine

    name = "generate" if backend is None else "generate-cpu"
    engine = Engine() if backend is None else Engine(backend=backend)
    try:
        load_start = time.perf_counter()
        info = engine.load(path).result(timeout=args.timeout)
        load_s = time.perf_counter() - load_start
        params = SamplingParams.greedy(max_tokens=args.max_tokens, seed=0)
        request = (GenerateRequest(messages=(ChatMessage("user", PROMPT),), params=params)
                   if info.has_chat_template else GenerateRequest(prompt=PROMPT, params=params))
        text, finished = engine.submit(request).text(timeout=args.timeout)
    finally:
        engine.shutdown(timeout=30)
    u = finished.usage
    detail = (f"on {info.backend}: {info.name} loaded in {load_s:.2f} s; {u.generated_tokens} tokens "
              f"({finished.reason}), first after {u.time_to_first_token_s:.2f} s, "
              f"{u.decode_tokens_per_s:.1f} tok/s: {text!r}")
    ok = finished.reason in ("stop", "length") and u.generated_tokens > 0
    if not ok:
        detail += f"; error: {finished.error}"
    check = Check(name, "PASS" if ok else "FAIL", detail)
    check.backend = info.backend
    check.output_ids = finished.output_token_ids
    return check


def check_generate_cpu(path: Path, args, best: Check) -> Check:
    best_backend = getattr(best, "backend", None)
    if best_backend == "cpu":
        return Check("generate-cpu", "SKIP", "the engine chose the CPU: covered by `generate`")
    check = check_generate(path, args, backend="cpu")
    gpu_ids = getattr(best, "output_ids", ())
    if check.status == "PASS" and gpu_ids:
        same = gpu_ids[:1] == check.output_ids[:1]
        check.detail += f"; first token {'matches' if same else 'differs from'} {best_backend}"
    return check


def check_diagnostics(model: Path | None) -> Check:
    """The engine's diagnostics with its self-test: every backend probed and self-tested, the selected
    one's readback self-test, and (on a GPU, given a model) its logits compared with the CPU's."""
    from engine.diagnostics import collect
    from engine.diagnostics_report import to_markdown

    report = collect(self_test=True, model_path=model)
    run = report.self_test
    if report.selected_backend is None:
        status, detail = "FAIL", f"no usable backend: {report.selected_reason}"
    else:
        status = "PASS" if run is not None and run.passed else "FAIL"
        detail = (f"selected {report.selected_backend} ({report.selected_reason}); readback path "
                  f"{report.readback_path}; self-test {'passed' if status == 'PASS' else 'FAILED'}")
    return Check("diagnostics", status, detail, extra=to_markdown(report))


# ---- plumbing --------------------------------------------------------------------------------------------
def _timed(name: str, fn) -> Check:
    start = time.perf_counter()
    try:
        check = fn()
    except Exception as e:   # noqa: BLE001 - a check that raises is a failed check, reported with its cause
        log.exception("self-test check %s raised", name)
        check = Check(name, "FAIL", f"{type(e).__name__}: {e}")
    check.seconds = time.perf_counter() - start
    log.info("self-test %s", check.line())
    return check


def render(checks: list[Check], failed: list[Check], total_s: float) -> str:
    from engine.diagnostics_report import redact_home

    lines = [f"Halo Chat self-test ({_app_version()}, Python {sys.version.split()[0]}, "
             f"{'frozen' if getattr(sys, 'frozen', False) else 'from source'}, {sys.platform})"]
    for c in checks:
        lines.append(c.line())
        if c.extra:
            lines += ["      | " + x for x in c.extra.rstrip().splitlines()]
    verdict = "FAILED: " + ", ".join(c.name for c in failed) if failed else "ALL PASSED"
    lines.append(f"{verdict} in {total_s:.1f} s")
    return redact_home("\n".join(lines) + "\n")     # pasted into bug reports: the model and log paths name the user


def _emit(text: str, report: str | None) -> None:
    if report:
        Path(report).write_text(text, encoding="utf-8")
    if sys.stdout is not None:        # None in a windowed Windows build without a console
        sys.stdout.write(text)
        sys.stdout.flush()


def _qt_version() -> str:
    from PySide6 import __version__
    return __version__


def _app_version() -> str:
    """The distribution's version; a frozen build carries it in VERSION.txt beside its modules (the
    bundle has no distribution metadata); a source checkout reads pyproject.toml."""
    try:
        from importlib.metadata import version
        return "halo-chat " + version("halo-chat")
    except Exception:   # noqa: BLE001 - not installed as a distribution
        pass
    root = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1]))
    for name, pattern in (("VERSION.txt", r"(\S+)"), ("pyproject.toml", r'(?m)^version\s*=\s*"([^"]+)"')):
        with contextlib.suppress(OSError):
            if m := re.search(pattern, (root / name).read_text(encoding="utf-8")):
                return "halo-chat " + m.group(1)
    return "halo-chat (version unknown)"


if __name__ == "__main__":
    sys.exit(main())
