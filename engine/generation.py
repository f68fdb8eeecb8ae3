"""One request's output side: detokenizing, stop strings, usage, events out.

Pure host logic, no model and no threads. The engine core feeds it each sampled id once it reached the
host (`on_token`), together with the scheduler's verdict (stop id, max_tokens, context full); stop
STRINGS are found here, and the core then tells the scheduler to finish the request. Sampling itself
happens in the runner (on the device, or the CPU executor's host Sampler).
"""
from __future__ import annotations

import time
from collections.abc import Callable

from engine.api import Event, Finished, FinishReason, GenerateRequest, PromptProgress, TextDelta, Usage
from engine.prompt import PromptFormat
from engine.reasoning import THINK_CLOSE, ReasoningParser, prompt_opens_think


def encode_prompt(prompt_format: PromptFormat, request: GenerateRequest) -> list[int]:
    """Token ids of the request's prompt: messages through the model's chat template, raw text, or ids."""
    if request.prompt_token_ids is not None:
        return [int(t) for t in request.prompt_token_ids]
    if request.messages is not None:
        options = {name: value for name, value in (("enable_thinking", request.enable_thinking),
                                                   ("reasoning_effort", request.reasoning_effort))
                   if value is not None}
        if request.tools is not None:
            options["tools"] = [dict(t) for t in request.tools]
        if request.continue_final_message:      # the reply so far follows the generation prompt verbatim
            reply, tokenizer = request.messages[-1].content, prompt_format.tokenizer
            ids = prompt_format.encode_chat(request.messages[:-1], **options)
            if reply and prompt_opens_think(tokenizer, ids):
                # the reply so far is answer text, so the think block the template opened is over: closed as the
                # template closes an empty one (Qwen3's "<think>\n\n</think>\n\n"), else the model would go on
                # inside its reasoning
                ids += tokenizer.encode(f"\n{THINK_CLOSE}\n\n", add_bos=False, add_eos=False, parse_special=True)
            return ids + tokenizer.encode(reply, add_bos=False, add_eos=False)
        return prompt_format.encode_chat(request.messages, **options)
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


# Decode speed needs a few tokens: with async scheduling the next token's result is often read back right after
# the first one's, so a reply of 2-3 tokens timed 3,000+ tok/s. Below this many decoded tokens it is 0 (not known).
MIN_TIMED_DECODE = 4


class Generation:
    """State of one request from admission to its Finished event.

    Lifecycle: construct with the prompt ids -> `on_token(id, reason)` once per sampled id, in order ->
    events go to `emit` -> `finished` becomes True exactly once (`finish()` also aborts or fails it).
    """

    def __init__(self, request: GenerateRequest, prompt_ids: list[int], tokenizer, stop_ids: frozenset[int],
                 emit: Callable[[Event], None], reasoning: ReasoningParser | None = None, turns_left_out: int = 0,
                 system_prompt_left_out: bool = False):
        """`turns_left_out`, `system_prompt_left_out`: what engine.context_fit dropped to fit the prompt (Finished
        says)."""
        self.request = request
        self.turns_left_out = turns_left_out
        self.system_prompt_left_out = system_prompt_left_out
        self.params = request.params
        self.prompt_ids = list(prompt_ids)
        self.output_ids: list[int] = []
        self.detok = tokenizer.stream_decoder()
        self.stop_ids = stop_ids
        self.stops = StopStringMatcher(tuple(self.params.stop))
        self.emit = emit
        self.reasoning = reasoning      # splits thinking from the answer; None: all text is answer
        self.first_top_logits: tuple[tuple[int, float], ...] = ()
        self.finished = False
        self.t_start = time.perf_counter()
        self.t_first: float | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def on_token(self, token: int, reason: FinishReason | None) -> bool:
        """One sampled id on the host. `reason`: the scheduler finished the request with it (a stop id,
        max_tokens or a full context). Detokenizes, checks stop strings, emits. Returns True when a stop
        string ended the request here (the caller must then finish it in the scheduler too)."""
        if self.finished:
            return False
        if self.t_first is None:
            self.t_first = time.perf_counter()
        self.output_ids.append(token)
        if token in self.stop_ids:
            self.finish("stop")
            return reason is None
        text, matched = self.stops.feed(self.detok.push(token))
        if text or not matched:
            self._emit_text(text, (token,), token)
        if matched:
            self.finish("stop", flush=False)
            return reason is None
        if reason is not None:
            self.finish(reason)
        return False

    def on_prompt_progress(self, processed: int) -> None:
        """A prefill chunk ended with `processed` prompt tokens in the cache (only if the request asked)."""
        if self.request.report_progress and not self.finished:
            self.emit(PromptProgress(self.request_id, processed, len(self.prompt_ids)))

    def _emit_text(self, text: str, token_ids: tuple[int, ...], token: int) -> None:
        if self.reasoning is None:
            self.emit(TextDelta(self.request_id, text, token_ids))
            return
        thought, answer = self.reasoning.feed(token, text)
        self.emit(TextDelta(self.request_id, answer, token_ids, thought))

    def finish(self, reason: FinishReason, error: str | None = None, flush: bool = True) -> None:
        if self.finished:
            return
        self.finished = True
        if flush and reason in ("stop", "length"):
            tail, _ = self.stops.feed(self.detok.flush())
            tail += self.stops.flush()
            if tail:
                self._emit_text(tail, (), -1)
        if self.reasoning is not None:
            thought, answer = self.reasoning.flush()
            if thought or answer:
                self.emit(TextDelta(self.request_id, answer, (), thought))
        self.emit(Finished(self.request_id, reason, self.usage(), tuple(self.prompt_ids), tuple(self.output_ids),
                           self.first_top_logits, error, turns_left_out=self.turns_left_out,
                           system_prompt_left_out=self.system_prompt_left_out))

    def usage(self) -> Usage:
        now = time.perf_counter()
        ttft = (self.t_first - self.t_start) if self.t_first is not None else 0.0
        decoded = len(self.output_ids) - 1
        decode_time = now - self.t_first if self.t_first is not None else 0.0
        timed = decoded >= MIN_TIMED_DECODE and decode_time > 0
        return Usage(prompt_tokens=len(self.prompt_ids), generated_tokens=len(self.output_ids),
                     time_to_first_token_s=ttft,
                     decode_tokens_per_s=decoded / decode_time if timed else 0.0,
                     total_time_s=now - self.t_start)
