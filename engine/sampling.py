"""Token sampling on the host: greedy, temperature, top-k, top-p, min-p and repetition penalty.

Order of operations (as in vLLM): repetition penalty -> temperature -> top-k -> top-p -> min-p -> draw.
Greedy (temperature <= 0) is the argmax after the penalty. Each request owns a `Sampler` with its own
numpy Generator: no other request draws from its stream, so a seeded request run again the same way gives the
same tokens. Beside other requests its logits can differ in the last bits (a batch sums the products in another
order: ~1e-6 on the CPU), which can change a draw where two tokens are nearly tied.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from engine.api import SamplingParams
from engine.errors import InvalidRequestError

# Bounds of the request values (one place: the engine, the server and the app's stored settings use them).
MAX_TEMPERATURE = 100.0
MAX_REPETITION_PENALTY = 100.0
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 512
MAX_SEED = (1 << 64) - 1


def _number(name: str, value, lo: float, hi: float, *, lo_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidRequestError(f"{name} must be a number, not {type(value).__name__}", field=name)
    if not math.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, not {value}", field=name)
    if value < lo or value > hi or (lo_open and value == lo):
        low = f"above {lo}" if lo_open else f"at least {lo}"
        raise InvalidRequestError(f"{name} is {value}; it must be {low} and at most {hi}", field=name)


def _integer(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidRequestError(f"{name} must be an integer, not {type(value).__name__}", field=name)
    if not lo <= value <= hi:
        raise InvalidRequestError(f"{name} is {value}; it must be from {lo} to {hi}", field=name)


def check_params(p: SamplingParams) -> None:
    """Every SamplingParams field in its valid range, else InvalidRequestError naming the field."""
    _number("temperature", p.temperature, 0.0, MAX_TEMPERATURE)
    _integer("top_k", p.top_k, 0, 1 << 31)
    _number("top_p", p.top_p, 0.0, 1.0, lo_open=True)
    _number("min_p", p.min_p, 0.0, 1.0)
    _number("repetition_penalty", p.repetition_penalty, 0.0, MAX_REPETITION_PENALTY, lo_open=True)
    _integer("max_tokens", p.max_tokens, 1, 1 << 31)
    if p.seed is not None:
        _integer("seed", p.seed, 0, MAX_SEED)
    _integer("top_logits", p.top_logits, 0, 1 << 31)     # above TOP_LOGITS_MAX reports that many
    if not isinstance(p.stop, (tuple, list)) or len(p.stop) > MAX_STOP_STRINGS:
        raise InvalidRequestError(f"stop must be a list of at most {MAX_STOP_STRINGS} strings", field="stop")
    for s in p.stop:
        if not isinstance(s, str) or not 0 < len(s) <= MAX_STOP_CHARS:
            raise InvalidRequestError(f"each stop string must be text of 1 to {MAX_STOP_CHARS} characters",
                                      field="stop")


def apply_repetition_penalty(logits: np.ndarray, seen_ids: Iterable[int], penalty: float) -> np.ndarray:
    """Copy of `logits` [vocab] in which every id in `seen_ids` is made less likely: a positive logit is
    divided by `penalty`, a negative one multiplied (so it moves away from zero in both cases)."""
    out = np.array(logits, dtype=np.float32, copy=True)
    if penalty == 1.0:
        return out
    ids = np.fromiter(set(seen_ids), dtype=np.int64)
    if ids.size:
        ids = ids[(ids >= 0) & (ids < out.size)]
        vals = out[ids]
        out[ids] = np.where(vals > 0, vals / penalty, vals * penalty)
    return out


def filtered_probs(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The candidates that survive temperature/top-k/top-p/min-p and their renormalized probabilities:
    (ids [n] int64, probs [n] float64, summing to 1). Needs temperature > 0."""
    scaled = logits.astype(np.float64) / params.temperature
    vocab = scaled.size
    if 0 < params.top_k < vocab:
        ids = np.argpartition(-scaled, params.top_k - 1)[: params.top_k]
    else:
        ids = np.arange(vocab)
    ids = ids[np.argsort(-scaled[ids], kind="stable")]            # best first
    probs = np.exp(scaled[ids] - scaled[ids[0]])
    probs /= probs.sum()
    if params.top_p < 1.0:
        # keep the smallest prefix whose mass reaches top_p (the best token is always kept)
        keep = int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1
        ids, probs = ids[:keep], probs[:keep]
    if params.min_p > 0.0:
        mask = probs >= params.min_p * probs[0]
        mask[0] = True                  # the best token always survives (min_p == 1 with rounding)
        ids, probs = ids[mask], probs[mask]
    return ids, probs / probs.sum()


class Sampler:
    """Per-request sampler. `sample` is called once per generated token with that step's logits."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def sample(self, logits: np.ndarray, seen_ids: Iterable[int] = ()) -> int:
        """logits [vocab] float32; `seen_ids`: prompt + output ids, for the repetition penalty."""
        p = self.params
        if p.repetition_penalty != 1.0:
            logits = apply_repetition_penalty(logits, seen_ids, p.repetition_penalty)
        best = int(np.argmax(logits))
        if p.temperature <= 0.0 or p.top_k == 1 or not np.isfinite(logits[best]):
            return best                 # greedy, or a +inf logit (certain token); NaN never wins argmax
        ids, probs = filtered_probs(logits, p)
        return int(ids[min(int(np.searchsorted(np.cumsum(probs), self.rng.random(), side="right")), len(ids) - 1)])
