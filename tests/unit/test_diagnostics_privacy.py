"""What a user pastes into a bug report (the diagnostics report copied or saved, `python -m engine diagnose`,
`HaloChat --self-test`) must not name them: paths under their home folder carry the user name
(C:\\Users\\alice\\..., /home/alice/...). The home folder is written as ~."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.self_test import check_model, render
from engine.diagnostics import collect
from engine.diagnostics_report import DiagnosticsReport, LogitsCheck, SelfTestRun, redact_home, to_markdown

MACHINES = Path(__file__).parent / "data" / "diagnostics"


@pytest.fixture(autouse=True)
def caches_elsewhere(tmp_path, monkeypatch):
    """The tests move HOME onto real folders (the checkout, the models' parent): what the app keeps under HOME
    (kernel caches) goes to the test's own folder instead."""
    monkeypatch.setenv("HALO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HALO_DATA_DIR", str(tmp_path / "data"))


def test_the_report_of_this_machine_names_no_home_folder(monkeypatch):
    home = Path(sys.executable).parents[2]          # the folder holding the virtual environment, as a home
    monkeypatch.setenv("HOME", str(home))
    report = collect()
    assert report.system.python_executable.startswith(str(home))     # the view itself shows the real path
    for text in (to_markdown(report), report.to_json()):
        assert str(home) not in text
        assert "~/" + Path(sys.executable).relative_to(home).as_posix() in text
    assert DiagnosticsReport.from_json(report.to_json()).system.python_executable.startswith("~")


def test_a_windows_report_names_no_user_in_either_rendering():
    report = DiagnosticsReport.from_json((MACHINES / "seed-windows-gfx1151.json").read_text(encoding="utf-8"))
    home = r"C:\Users\alice"
    report.system.python_executable = home + r"\AppData\Local\Programs\Halo Chat\HaloChat.exe"
    report.probes[0].reason = (r"cuda driver (nvcuda.dll) not found in: c:\users\alice\bin, "
                               "C:/Users/alice/AppData/Local/Microsoft/WindowsApps, nor by the system loader")
    report.self_test = SelfTestRun.from_dict({"backend": "cpu", "readback": {"backend": "cpu", "passed": True}})
    report.self_test.logits = LogitsCheck(True, "matches", model_path=home + r"\AppData\Local\Halo Chat\m.gguf")
    md, data = redact_home(to_markdown(report), home), json.dumps(redact_home(report.to_dict(), home))
    for text in (md, data):
        assert "alice" not in text.lower()
    assert r"~\AppData\Local\Programs\Halo Chat\HaloChat.exe" in md
    assert "C:/Users/alicea" == redact_home("C:/Users/alicea", home)     # another user's folder stays


def test_the_self_test_printout_names_no_home_folder(monkeypatch, smollm2_path):
    home = smollm2_path.parents[2]
    monkeypatch.setenv("HOME", str(home))
    text = render([check_model(str(smollm2_path))], [], 0.0)
    assert str(home) not in text and "~/" in text
