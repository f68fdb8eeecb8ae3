"""Hostile chat templates cost bounded time and memory, whatever C-level call they make.

A heartbeat thread in this process ticks every 10 ms while each template runs: the longest gap proves
no thread here stalled (the old in-process render froze every thread for 6-123 s). Each call returns
within the time limit + 0.5 s. The worker's resident memory, sampled by the same thread, stays under
the stated cap (WORKER_MEMORY_LIMIT, the RLIMIT_AS the worker sets on POSIX).
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from engine.chat_template import ChatTemplate
from engine.errors import TemplateError
from engine.template_worker import WORKER_MEMORY_LIMIT, shared_worker

LIMIT_S = 1.0
USER = [{"role": "user", "content": "hi"}]
HOSTILE = {
    "nested list to string": "{{ ([[0] * 4000000] * 100) | string }}",
    "sum of big lists": "{{ ([[0] * 1000000] * 200) | sum(start=[]) | length }}",
    "namespace accumulating big strings": (
        "{% set ns = namespace(l=[]) %}{% for i in range(2000) %}{% set ns.l = ns.l + ['x' * 3000000] %}"
        "{% endfor %}{{ ns.l | length }}"),
    "format width in an argument": "{{ '{0:{1}}'.format('x', '1000000000') }}",
    "replace filter growth": "{{ ('a' * 3000000) | replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaa') | length }}",
    "constant folded at compile time": "{{ ('word ' * 780000) | wordwrap(1) }}",
    "endless loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
}


class Heartbeat:
    """Ticks every 10 ms; records the longest gap and the worker's peak RSS (Linux /proc)."""

    def __init__(self):
        self.longest_gap = 0.0
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        last = time.monotonic()
        while not self._stop.wait(0.01):
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now
            proc = shared_worker()._proc
            if proc is not None and sys.platform.startswith("linux"):
                try:
                    pages = int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1])
                    self.peak_rss = max(self.peak_rss, pages * 4096)
                except (OSError, ValueError, IndexError):
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("source", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_template_is_stopped_without_stalling_this_process(source):
    shared_worker().warm_up()
    good = ChatTemplate("{{ messages[0]['content'] }}", time_limit_s=LIMIT_S)
    assert good.render(USER) == "hi"                 # the worker is warm: no start-up in the timing
    with Heartbeat() as beat:
        start = time.monotonic()
        try:
            ChatTemplate(source, time_limit_s=LIMIT_S).render(USER)
            refused = False
        except TemplateError:
            refused = True
        elapsed = time.monotonic() - start
    assert refused
    assert elapsed < LIMIT_S + 0.5
    assert beat.longest_gap < 0.5, f"a thread of this process stalled {beat.longest_gap:.2f} s"
    if sys.platform.startswith("linux"):
        assert beat.peak_rss < WORKER_MEMORY_LIMIT
    assert good.render(USER) == "hi"                 # and the next render works (restarted worker)


def test_rendering_is_fast_on_the_warm_worker():
    template = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    template.render(USER)
    start = time.monotonic()
    for _ in range(50):
        template.render(USER * 20)
    per_call = (time.monotonic() - start) / 50
    assert per_call < 0.05, f"{per_call * 1000:.1f} ms per render"


def test_a_refused_template_leaves_the_model_usable_with_a_plain_format():
    from test_tokenizer import bpe_metadata

    from engine.prompt import PlainChatFormat, PromptFormat

    md = {**bpe_metadata(), "tokenizer.chat_template": "{% for %}"}
    fmt = PromptFormat.from_metadata(md)
    assert isinstance(fmt.template, PlainChatFormat) and "refused" in fmt.template_notice
    ids = fmt.encode_chat([{"role": "user", "content": "hello"}])
    assert fmt.tokenizer.decode(ids).endswith("User: hello\n\nAssistant:")
