"""The CPU's compiled quantized kernels (engine.model.quant_kernels) against the reference decoder
(engine.gguf.dequantize) on random blocks of every type they serve: the decode is bit-exact, and every
product equals dequantize-then-matmul in float32 up to summation order."""
import numpy as np
import pytest

from engine.gguf.dequant import dequantize
from engine.gguf.types import GGMLType
from engine.model.kernel_bench import random_blocks
from engine.model.quant_matrix import (
    WAKE_WEIGHTS,
    QuantLinear,
    QuantMatrix,
    kernel_blocks,
    kernel_path,
    serial_product,
)

pytestmark = pytest.mark.skipif(kernel_path() != "numba", reason="numba is not installed here")

TYPES = sorted(kernel_blocks(), key=int)


def random_matrix(t: GGMLType, rows: int, blocks_per_row: int, rng) -> tuple[np.ndarray, int]:
    """(raw [rows, bytes per row] uint8 of random blocks with finite scales, cols)."""
    cols = blocks_per_row * kernel_blocks()[t]
    return random_blocks(t, rows, cols, rng, scale=0.1), cols


def test_every_type_the_loader_keeps_quantized_has_kernels():
    from engine.model import quant_kernels

    # the estimate's cheap table (no numba import) is the kernels' own
    assert {t: v[0] for t, v in quant_kernels.KERNELS.items()} == kernel_blocks()
    assert set(TYPES) >= {GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q4_K,
                          GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.MXFP4, GGMLType.F16}


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_kernels_equal_dequantize_then_matmul(t):
    rng = np.random.default_rng(int(t))
    rows = 37                                  # not a multiple of the rows one parallel task takes
    raw, cols = random_matrix(t, rows, 3, rng)
    want = dequantize(raw, t, rows * cols).reshape(rows, cols)
    assert np.isfinite(want).all()
    m = QuantMatrix(raw, t, rows, cols)

    np.testing.assert_array_equal(m.dequantize(), want)                  # the decode: bit-exact
    np.testing.assert_array_equal(m.dequantize(5, 21), want[5:21])
    wide = np.full((rows, cols + 8), np.nan, np.float32)      # not contiguous: the element-by-element stores
    m.dequantize(out=wide[:, 3:3 + cols])
    np.testing.assert_array_equal(wide[:, 3:3 + cols], want)
    assert np.isnan(wide[:, :3]).all() and np.isnan(wide[:, 3 + cols:]).all()
    ids = np.array([36, 0, 7, 7])
    np.testing.assert_array_equal(m.take(ids), want[ids])

    x = rng.normal(size=(9, cols)).astype(np.float32)
    ref = x.astype(np.float64) @ want.T.astype(np.float64)
    tol = 1e-5 * np.abs(x).max() * np.abs(want).max() * cols             # float32 rounding of a cols-long sum
    out = np.empty(rows, np.float32)
    m.matvec(x[0], out)                                                  # one token: the compiled dot
    np.testing.assert_allclose(out, ref[0], rtol=0, atol=tol)
    for T in (1, 3, 9):                        # per-token products, then decoded chunks + BLAS (prefill)
        np.testing.assert_allclose(QuantLinear((m,))(x[:T]), ref[:T], rtol=0, atol=tol)


def test_fused_parts_of_mixed_types_sit_side_by_side():
    """q|k|v of different types (a Q4_K_M file mixes Q4_K, Q6_K and F32) in one QuantLinear."""
    rng = np.random.default_rng(1)
    a_raw, cols = random_matrix(GGMLType.Q4_K, 8, 1, rng)
    b_raw, _ = random_matrix(GGMLType.Q6_K, 4, 1, rng)
    c = rng.normal(size=(3, cols)).astype(np.float32)
    a = QuantMatrix(a_raw, GGMLType.Q4_K, 8, cols)
    b = QuantMatrix(b_raw, GGMLType.Q6_K, 4, cols)
    fused = QuantLinear((a, b, c))
    assert fused.shape == (15, cols) and fused.nbytes == a_raw.nbytes + b_raw.nbytes + c.nbytes
    w = np.concatenate([a.dequantize(), b.dequantize(), c])
    for T in (1, 6):
        x = rng.normal(size=(T, cols)).astype(np.float32)
        np.testing.assert_allclose(fused(x), x @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K],
                         ids=lambda t: t.name)
def test_fused_parts_of_one_type_run_as_one_call_equal_to_each_part_alone(t):
    """q|k|v and gate|up of one type: one kernel call per token. Each row's sum is computed exactly as the
    one-matrix call computes it (bit-equal), and equals dequantize-then-matmul up to summation order. Four
    parts (more than one call takes) and a float32 part in between split into several calls."""
    rng = np.random.default_rng(10 + int(t))
    parts = []
    for rows in (40, 7, 7, 19):                # q (not a multiple of the rows per task), k, v, a fourth
        raw, cols = random_matrix(t, rows, 2, rng)
        parts.append(QuantMatrix(raw, t, rows, cols))
    dense = rng.normal(size=(5, cols)).astype(np.float32)
    x = rng.normal(size=(3, cols)).astype(np.float32)
    want = np.concatenate([p.dequantize() for p in parts[:3]]).astype(np.float64)
    tol = 1e-5 * np.abs(x).max() * np.abs(want).max() * cols
    for fused in (QuantLinear(tuple(parts[:3])), QuantLinear(tuple(parts[:2])), QuantLinear(tuple(parts)),
                  QuantLinear((parts[0], dense, parts[1], parts[2]))):
        for T in (1, 3):                       # decode sizes: per token, one call per run of parts
            got = fused(x[:T])
            alone = np.concatenate([_alone(p, x[:T]) for p in fused.parts], axis=1)
            quantized = [isinstance(p, QuantMatrix) for p in fused.parts for _ in range(p.shape[0])]
            np.testing.assert_array_equal(got[:, quantized], alone[:, quantized])
            np.testing.assert_allclose(got[:, np.logical_not(quantized)], alone[:, np.logical_not(quantized)],
                                       rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(QuantLinear(tuple(parts[:3]))(x[:1])[0], want @ x[0], rtol=0, atol=tol)


def _alone(p, x):
    """x [T, cols] @ p.T one part at a time: QuantMatrix.matvec per token, or float32 BLAS."""
    if not isinstance(p, QuantMatrix):
        return x @ p.T
    out = np.empty((len(x), p.rows), np.float32)
    for t in range(len(x)):
        p.matvec(x[t], out[t])
    return out


def test_products_from_two_threads_at_once_are_right():
    """A chat and a diagnostics run may forward on the CPU at the same time."""
    from concurrent.futures import ThreadPoolExecutor

    import numba

    rng = np.random.default_rng(2)
    rows = 2 * WAKE_WEIGHTS // 128 + 1         # big enough for a parallel product on 2 or more threads
    raw, cols = random_matrix(GGMLType.Q8_0, rows, 4, rng)
    assert not serial_product(rows * cols) or numba.get_num_threads() < 2
    m = QuantLinear((QuantMatrix(raw, GGMLType.Q8_0, rows, cols),))
    xs = [rng.normal(size=(1, cols)).astype(np.float32) for _ in range(2)]
    want = [m(x) for x in xs]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda i: [m(xs[i]) for _ in range(50)], range(2)))
    for i in range(2):
        for g in got[i]:
            np.testing.assert_array_equal(g, want[i])


def test_kernel_bench_prints_a_rate_for_every_type(capsys):
    from engine.model import kernel_bench

    kernel_bench.main(["--rows", "16", "--cols", "256", "--seconds", "0.01", "--repeat", "1"])
    lines = capsys.readouterr().out.splitlines()
    rates = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rates) == {t.name for t in TYPES}
    for name, fields in rates.items():           # "Q4_1 one thread 12.64 2 threads 12.20"
        assert float(fields[3]) > 0 and float(fields[6]) > 0, name
