"""Sampling behaviour on fabricated logits: real draws with fixed seeds, compared to exact distributions."""
import numpy as np
import pytest

from engine.api import SamplingParams
from engine.sampling import Sampler, apply_repetition_penalty, filtered_probs


def params(**kw) -> SamplingParams:
    base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234)
    base.update(kw)
    return SamplingParams(**base)


def draw(sampler: Sampler, logits: np.ndarray, n: int) -> np.ndarray:
    return np.bincount([sampler.sample(logits) for _ in range(n)], minlength=logits.size) / n


LOGITS = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03], dtype=np.float32))


def test_greedy_is_argmax_and_ignores_seed():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    for seed in (1, 2, 3):
        assert Sampler(SamplingParams.greedy(seed=seed)).sample(logits) == 1


def test_top_k_1_equals_greedy_even_with_high_temperature():
    rng = np.random.default_rng(0)
    for _ in range(20):
        logits = rng.normal(size=50).astype(np.float32)
        assert Sampler(params(temperature=5.0, top_k=1)).sample(logits) == int(np.argmax(logits))


def test_temperature_1_matches_softmax_distribution():
    freq = draw(Sampler(params()), LOGITS, 20000)
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.15, 0.07, 0.03], atol=0.015)


def test_low_temperature_sharpens_high_temperature_flattens():
    cold = draw(Sampler(params(temperature=0.3)), LOGITS, 4000)
    hot = draw(Sampler(params(temperature=3.0)), LOGITS, 4000)
    assert cold[0] > 0.85
    assert hot[0] < 0.35 and hot[4] > 0.1


def test_top_k_restricts_support_and_renormalizes():
    freq = draw(Sampler(params(top_k=2)), LOGITS, 12000)
    assert freq[2:].sum() == 0
    np.testing.assert_allclose(freq[:2], [2 / 3, 1 / 3], atol=0.02)


def test_top_p_keeps_smallest_prefix_reaching_mass():
    ids, probs = filtered_probs(LOGITS, params(top_p=0.8))
    assert ids.tolist() == [0, 1, 2]            # 0.5 + 0.25 < 0.8 <= 0.9
    np.testing.assert_allclose(probs, np.array([0.5, 0.25, 0.15]) / 0.9, rtol=1e-5)
    ids, _ = filtered_probs(LOGITS, params(top_p=0.01))
    assert ids.tolist() == [0]                  # the best token always survives


def test_min_p_drops_tokens_below_fraction_of_best():
    ids, probs = filtered_probs(LOGITS, params(min_p=0.25))    # threshold 0.125
    assert sorted(ids.tolist()) == [0, 1, 2]
    freq = draw(Sampler(params(min_p=0.25)), LOGITS, 8000)
    assert freq[3:].sum() == 0


def test_seeded_requests_reproduce_and_differ_by_seed():
    logits = np.random.default_rng(5).normal(size=1000).astype(np.float32)
    first = Sampler(params(seed=7)).sample(logits)
    s1, s2, s3 = Sampler(params(seed=7)), Sampler(params(seed=7)), Sampler(params(seed=8))
    seq1 = [s1.sample(logits) for _ in range(30)]
    assert seq1 == [s2.sample(logits) for _ in range(30)]
    assert seq1 != [s3.sample(logits) for _ in range(30)]
    assert first == seq1[0]


def test_repetition_penalty_direction_for_positive_and_negative_logits():
    logits = np.array([2.0, -2.0, 1.0, -1.0], dtype=np.float32)
    out = apply_repetition_penalty(logits, [0, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, -1.0]     # both penalized ids become less likely
    assert logits.tolist() == [2.0, -2.0, 1.0, -1.0]  # input untouched


def test_repetition_penalty_changes_greedy_choice():
    logits = np.array([3.0, 2.5, 0.0], dtype=np.float32)
    sampler = Sampler(SamplingParams.greedy(repetition_penalty=1.5))
    assert sampler.sample(logits, seen_ids=[]) == 0
    assert sampler.sample(logits, seen_ids=[0]) == 1          # 3.0 / 1.5 = 2.0 < 2.5


def test_large_vocab_with_all_filters_stays_in_top_k():
    logits = np.random.default_rng(3).normal(size=262144).astype(np.float32) * 4
    top = set(np.argsort(-logits)[:40].tolist())
    s = Sampler(SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=3))
    assert all(s.sample(logits) in top for _ in range(50))


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_infinite_logit_is_handled(bad):
    logits = np.array([0.0, 1.0, bad], dtype=np.float32)
    tokens = {Sampler(params(seed=i)).sample(logits) for i in range(50)}
    assert tokens == ({2} if bad > 0 else {0, 1})
