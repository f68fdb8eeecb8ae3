"""One request's generation state: prompt ids, sampler, detokenizer, stop conditions, events out.

Pure host logic, no model and no threads: the engine loop feeds it logits (`on_logits`) and reads the
events it produced. A scheduler can drive many of these at once; this module does not know how many run.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from engine.api import Event, Finished, FinishReason, GenerateRequest, TextDelta, Usage
from engine.prompt import PromptFormat
from engine.sampling import Sampler


def encode_prompt(prompt_format: PromptFormat, request: GenerateRequest) -> list[int]:
    """Token ids of the request's prompt: messages through the model's chat template, or raw text."""
    if request.messages is not None:
        return prompt_format.encode_chat(request.messages)
    return prompt_format.encode_raw(request.prompt)


class StopStringMatcher:
    """Holds back text that might be the start of a stop string, so a stop string is never emitted even
    when it spans several tokens. `feed(text) -> (text safe to emit, matched?)`."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            out = self.pending[: min(hits)]
            self.pending = ""
            return out, True
        hold = 0
        for stop in self.stops:            # longest suffix of pending that is a proper prefix of a stop
            for n in range(min(len(stop) - 1, len(self.pending)), hold, -1):
                if self.pending.endswith(stop[:n]):
                    hold = n
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class Generation:
    """State of one request from admission to its Finished event.

    Lifecycle: construct with the prompt ids -> the engine runs prefill and decode steps and calls
    `on_logits(logits)` once per step that produced a token -> events accumulate in `take_events()` ->
    `finished` becomes True exactly once (`finish()` is also the way to abort or fail it).
    """

    def __init__(self, request: GenerateRequest, prompt_ids: list[int], tokenizer, stop_ids: frozenset[int],
                 max_context: int, emit: Callable[[Event], None]):
        self.request = request
        self.params = request.params
        self.prompt_ids = list(prompt_ids)
        self.output_ids: list[int] = []
        self.sampler = Sampler(self.params)
        self.detok = tokenizer.stream_decoder()
        self.stop_ids = stop_ids
        self.max_context = max_context
        self.stops = StopStringMatcher(tuple(self.params.stop))
        self.emit = emit
        self.first_top_logits: tuple[tuple[int, float], ...] = ()
        self.finished = False
        self.t_start = time.perf_counter()
        self.t_first: float | None = None
        self._seen: set[int] = set(self.prompt_ids)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_tokens(self) -> int:
        """Tokens in the sequence so far (prompt + generated)."""
        return len(self.prompt_ids) + len(self.output_ids)

    def on_logits(self, logits: np.ndarray) -> None:
        """logits [vocab] for the next token: sample, detokenize, check stop conditions, emit."""
        if self.params.top_logits > 0 and not self.output_ids:
            k = min(self.params.top_logits, logits.size)
            top = np.argpartition(-logits, k - 1)[:k]
            top = top[np.argsort(-logits[top], kind="stable")]
            self.first_top_logits = tuple((int(i), float(logits[i])) for i in top)
        token = self.sampler.sample(logits, self._seen)
        if self.t_first is None:
            self.t_first = time.perf_counter()
        self.output_ids.append(token)
        self._seen.add(token)
        if token in self.stop_ids:
            self.finish("stop")
            return
        text, matched = self.stops.feed(self.detok.push(token))
        if text or not matched:
            self.emit(TextDelta(self.request_id, text, (token,)))
        if matched:
            self.finish("stop", flush=False)
        elif len(self.output_ids) >= self.params.max_tokens or self.num_tokens >= self.max_context:
            self.finish("length")

    def finish(self, reason: FinishReason, error: str | None = None, flush: bool = True) -> None:
        if self.finished:
            return
        self.finished = True
        if flush and reason in ("stop", "length"):
            tail, _ = self.stops.feed(self.detok.flush())
            tail += self.stops.flush()
            if tail:
                self.emit(TextDelta(self.request_id, tail, ()))
        self.emit(Finished(self.request_id, reason, self.usage(), tuple(self.prompt_ids), tuple(self.output_ids),
                           self.first_top_logits, error))

    def usage(self) -> Usage:
        now = time.perf_counter()
        ttft = (self.t_first - self.t_start) if self.t_first is not None else 0.0
        decoded = len(self.output_ids) - 1
        decode_time = now - self.t_first if self.t_first is not None else 0.0
        return Usage(prompt_tokens=len(self.prompt_ids), generated_tokens=len(self.output_ids),
                     time_to_first_token_s=ttft,
                     decode_tokens_per_s=decoded / decode_time if decoded > 0 and decode_time > 0 else 0.0,
                     total_time_s=now - self.t_start)
