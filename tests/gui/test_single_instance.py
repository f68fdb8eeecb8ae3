"""A second launch on the same data folder shows the first window and exits; it never opens the store."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from app.single_instance import SingleInstance, bring_to_front

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def test_the_second_owner_is_refused_and_its_show_request_reaches_the_first(qtbot, tmp_path):
    first = SingleInstance(tmp_path / "data")
    assert first.acquire()
    second = SingleInstance(tmp_path / "data")
    assert not second.acquire()
    with qtbot.waitSignal(first.activated, timeout=5_000):
        assert second.notify_owner()
    first.release()
    third = SingleInstance(tmp_path / "data")
    assert third.acquire()                       # released: the next launch owns it
    third.release()


def test_a_second_app_launch_exits_and_raises_the_first_window(qtbot, make_window, tmp_path):
    window = make_window(engine="own")
    owner = SingleInstance(tmp_path / "data")    # the HALO_DATA_DIR every test gets (tests/gui/conftest.py)
    assert owner.acquire()
    raised = []
    owner.activated.connect(lambda: (raised.append(True), bring_to_front(window)))
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    start = time.monotonic()
    second = subprocess.Popen([sys.executable, "-m", "app", "--settings-dir", str(tmp_path / "settings2")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    qtbot.waitUntil(lambda: bool(raised), timeout=60_000)   # the event loop serves the owner meanwhile
    assert second.wait(30) == 0
    assert time.monotonic() - start < 60
    owner.release()
