"""The load bar shows the progress of the load under way only: a load that was replaced (a quick switch from
A to B) may still report from the engine thread, and its fractions must not reach the bar."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.engine_client import EngineClient
from engine.api import LoadProgress
from engine.engine import Engine

pytestmark = [pytest.mark.gui]

TINY = Path(__file__).parents[1] / "golden" / "data"


class ProgressKeepingEngine(Engine):
    """A real Engine that hands each load's progress callback to the test instead of its loader: the test then
    reports for A and B in the order a race would, with no timing involved."""

    def __init__(self):
        super().__init__(backend="cpu")
        self.progress_of: dict[str, object] = {}

    def load(self, path, progress=None, max_context=None):
        self.progress_of[str(path)] = progress
        return super().load(path, max_context=max_context)


@pytest.fixture
def engine():
    e = ProgressKeepingEngine()
    yield e
    e.shutdown()


def test_a_replaced_load_reports_nothing_to_the_bar(qtbot, engine):
    client = EngineClient(engine=engine)
    first, second = str(TINY / "tiny-gemma3-f32.gguf"), str(TINY / "tiny-gemma3-q4_k_m.gguf")
    shown: list[tuple[float, str]] = []
    client.loadProgress.connect(lambda fraction, message: shown.append((fraction, message)))
    client.load(first)
    client.load(second)          # the switch: the first load is cancelled but its thread may still report
    engine.progress_of[second](LoadProgress(0.2, "second file"))
    engine.progress_of[first](LoadProgress(0.9, "first file"))
    with qtbot.waitSignal(client.loaded, timeout=30_000) as done:
        pass
    assert done.args[0].path == second
    assert shown == [(0.2, "second file")]
    client.shutdown()


def test_loading_the_same_file_again_drops_the_earlier_loads_progress(qtbot, engine):
    client = EngineClient(engine=engine)
    path = str(TINY / "tiny-gemma3-f32.gguf")
    shown: list[str] = []
    client.loadProgress.connect(lambda _fraction, message: shown.append(message))
    client.load(path)
    earlier = engine.progress_of[path]
    client.load(path)
    engine.progress_of[path](LoadProgress(0.3, "this load"))
    earlier(LoadProgress(0.8, "the cancelled load"))
    with qtbot.waitSignal(client.loaded, timeout=30_000):
        pass
    assert shown == ["this load"]
    client.shutdown()
