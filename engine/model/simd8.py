"""Eight-lane vectors for the numba kernels: LLVM's <8 x float> and <8 x i32> as numba types, with the few
operations the quantized block decoders need (engine.model.quant_kernels).

Why by hand: numba has no vector types, and LLVM's vectorizers do not vectorize the decoders as plain scalar
numba code. The loop vectorizer sees the 16- and 32-step inner loops only after they were fully unrolled, and the
SLP vectorizer cannot prove that the partial sums (an array) do not alias the weights or the activations, so each
weight became a scalar int-to-float conversion and a scalar multiply-add (measured 2026-12-07 on a Zen 3: ~4 G
weights/s on one core, ~2.5x slower than these vectors). Written as vectors here, the operations lower to the host's
SIMD instructions (AVX2 on Strix Halo: vpmovzxbd, vcvtdq2ps, vfmadd231ps; two 4-lane halves on SSE-only CPUs).

Contracts: every operation is exact IEEE float32 arithmetic on each lane, one rounding per operation (`fma`
rounds once), so a decoder built from them is bit-exact with scalar float32 code doing the same operations in
the same order. Array accesses read or write 8 consecutive elements starting at an index the caller keeps in
bounds; a contiguous ('C') array is accessed with one vector load or store, any other layout element by element.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model
from numba.np.arrayobj import make_array, populate_array

LANES = 8
_I32 = ir.IntType(32)
_FV = ir.VectorType(ir.FloatType(), LANES)
_IV = ir.VectorType(_I32, LANES)


class F32x8(types.Type):
    """Eight float32 lanes."""

    def __init__(self):
        super().__init__(name="F32x8")


class I32x8(types.Type):
    """Eight int32 lanes."""

    def __init__(self):
        super().__init__(name="I32x8")


f32x8 = F32x8()
i32x8 = I32x8()


@register_model(F32x8)
class _F32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _FV)


@register_model(I32x8)
class _I32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _IV)


# ---- helpers for the code generators --------------------------------------------------------------------

def _splat(builder, value, vector_type):
    one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vector_type, ir.Undefined), ir.Constant(_IV, [0] * LANES))


def _scalar(context, builder, value, from_type, to_type, vector_type):
    """A numba scalar cast to `to_type` and repeated in every lane."""
    return _splat(builder, context.cast(builder, value, from_type, to_type), vector_type)


def _element_pointers(context, builder, aryty, ary, index, count=LANES):
    """Pointers to ary[index + i] for i < count (1-D array of any layout)."""
    a = make_array(aryty)(context, builder, ary)
    strides = cgutils.unpack_tuple(builder, a.strides, 1)
    shape = cgutils.unpack_tuple(builder, a.shape, 1)
    return [cgutils.get_item_pointer2(context, builder, a.data, shape, strides, aryty.layout,
                                      [builder.add(index, ir.Constant(index.type, i))])
            for i in range(count)]


def _load(context, builder, aryty, ary, index, element_vector):
    """ary[index:index + len(element_vector)] as an LLVM vector of the array's element type."""
    if aryty.layout == "C":
        first = _element_pointers(context, builder, aryty, ary, index, count=1)[0]
        return builder.load(builder.bitcast(first, element_vector.as_pointer()), align=aryty.dtype.bitwidth // 8)
    v = ir.Constant(element_vector, ir.Undefined)
    for i, p in enumerate(_element_pointers(context, builder, aryty, ary, index, count=element_vector.count)):
        v = builder.insert_element(v, builder.load(p), ir.Constant(_I32, i))
    return v


def _load_args(context, builder, sig, args, element_vector):
    """The load of an intrinsic called as f(array, index): array[index:index + len(element_vector)]."""
    aryty, index_type = sig.args[:2]
    index = context.cast(builder, args[1], index_type, types.intp)
    return _load(context, builder, aryty, args[0], index, element_vector)


def _is_1d(ary, *dtypes) -> bool:
    return isinstance(ary, types.Array) and ary.ndim == 1 and ary.dtype in dtypes


# ---- loads and stores ------------------------------------------------------------------------------------

@intrinsic
def bytes8(typingctx, raw, index):
    """raw[index:index + 8] (uint8 or int8) -> I32x8, zero- or sign-extended as the array's dtype says."""
    if not (_is_1d(raw, types.uint8, types.int8) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v = _load_args(context, builder, sig, args, ir.VectorType(ir.IntType(8), LANES))
        return builder.sext(v, _IV) if sig.args[0].dtype == types.int8 else builder.zext(v, _IV)
    return i32x8(raw, index), codegen


@intrinsic
def halves8(typingctx, raw, index):
    """raw[index:index + 16] (uint8: eight little-endian float16) -> F32x8, converted exactly."""
    if not (_is_1d(raw, types.uint8) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        v = _load_args(context, builder, sig, args, ir.VectorType(ir.IntType(8), 2 * LANES))
        return builder.fpext(builder.bitcast(v, ir.VectorType(ir.HalfType(), LANES)), _FV)
    return f32x8(raw, index), codegen


@intrinsic
def load(typingctx, ary, index):
    """ary[index:index + 8] (float32) -> F32x8"""
    if not (_is_1d(ary, types.float32) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _load_args(context, builder, sig, args, _FV)
    return f32x8(ary, index), codegen


@intrinsic
def store(typingctx, ary, index, v):
    """ary[index:index + 8] = v (float32)"""
    if not (_is_1d(ary, types.float32) and isinstance(index, types.Integer) and v == f32x8):
        return None

    def codegen(context, builder, sig, args):
        aryty, index_type, _ = sig.args
        index = context.cast(builder, args[1], index_type, types.intp)
        if aryty.layout == "C":
            first = _element_pointers(context, builder, aryty, args[0], index, count=1)[0]
            builder.store(args[2], builder.bitcast(first, _FV.as_pointer()), align=4)
        else:
            for i, p in enumerate(_element_pointers(context, builder, aryty, args[0], index)):
                builder.store(builder.extract_element(args[2], ir.Constant(_I32, i)), p)
        return context.get_dummy_value()
    return types.none(ary, index, v), codegen


@intrinsic
def lookup(typingctx, table, v):
    """table[v] per lane (table: 1-D float32; v: I32x8 of indices the caller keeps in bounds) -> F32x8"""
    if not (_is_1d(table, types.float32) and v == i32x8):
        return None

    def codegen(context, builder, sig, args):
        out = ir.Constant(_FV, ir.Undefined)
        for i in range(LANES):
            lane = ir.Constant(_I32, i)
            index = builder.sext(builder.extract_element(args[1], lane), ir.IntType(64))
            p = _element_pointers(context, builder, sig.args[0], args[0], index, count=1)[0]
            out = builder.insert_element(out, builder.load(p), lane)
        return out
    return f32x8(table, v), codegen


@intrinsic
def scratch32(typingctx):
    """A float32 array of 32 elements on the stack of the function that calls it (one per thread; not zeroed).
    Where every access to it has a constant index, LLVM keeps it in four vector registers."""
    aryty = types.Array(types.float32, 1, "C")

    def codegen(context, builder, sig, args):
        buffer = cgutils.alloca_once(builder, ir.ArrayType(ir.FloatType(), 4 * LANES))
        intp = context.get_value_type(types.intp)
        a = make_array(aryty)(context, builder)
        populate_array(a, data=builder.bitcast(buffer, ir.FloatType().as_pointer()),
                       shape=[ir.Constant(intp, 4 * LANES)], strides=[ir.Constant(intp, 4)],
                       itemsize=ir.Constant(intp, 4), meminfo=None)
        return a._getvalue()
    return aryty(), codegen


# ---- integer lanes ---------------------------------------------------------------------------------------

def _integer_op(instruction: str, doc: str):
    @intrinsic
    def op(typingctx, v, n):
        if not (v == i32x8 and (n == i32x8 or isinstance(n, types.Integer))):
            return None

        def codegen(context, builder, sig, args):
            other = args[1] if sig.args[1] == i32x8 else _scalar(context, builder, args[1], sig.args[1],
                                                                   types.int32, _IV)
            return getattr(builder, instruction)(args[0], other)
        return i32x8(v, n), codegen
    op.__doc__ = doc
    return op


shr = _integer_op("lshr", "v >> n per lane (logical; n: an integer or I32x8)")
shl = _integer_op("shl", "v << n per lane")
band = _integer_op("and_", "v & n per lane")
bor = _integer_op("or_", "v | n per lane")
isub = _integer_op("sub", "v - n per lane")


@intrinsic
def bits8(typingctx, word, first):
    """(word >> (first + i)) & 1 in lane i: eight consecutive bits of an unsigned 32-bit `word` -> I32x8"""
    if not (isinstance(word, types.Integer) and isinstance(first, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        w = _scalar(context, builder, args[0], sig.args[0], types.uint32, _IV)
        shifts = builder.add(_scalar(context, builder, args[1], sig.args[1], types.int32, _IV),
                             ir.Constant(_IV, list(range(LANES))))
        return builder.and_(builder.lshr(w, shifts), ir.Constant(_IV, [1] * LANES))
    return i32x8(word, first), codegen


# ---- float lanes -----------------------------------------------------------------------------------------

@intrinsic
def to_f32(typingctx, v):
    """I32x8 -> F32x8 (exact below 2^24)"""
    if v != i32x8:
        return None

    def codegen(context, builder, sig, args):
        return builder.sitofp(args[0], _FV)
    return f32x8(v), codegen


@intrinsic
def scale(typingctx, v, s):
    """s * v per lane (s: a float32 scalar)"""
    if not (v == f32x8 and isinstance(s, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(_scalar(context, builder, args[1], sig.args[1], types.float32, _FV), args[0])
    return f32x8(v, s), codegen


@intrinsic
def affine(typingctx, v, s, bias):
    """s * v + bias per lane, rounded after the product and after the sum (not fused: bit-exact with the
    scalar decoders of engine.gguf.dequant)"""
    if not (v == f32x8 and isinstance(s, types.Float) and isinstance(bias, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        product = builder.fmul(_scalar(context, builder, args[1], sig.args[1], types.float32, _FV), args[0])
        return builder.fadd(product, _scalar(context, builder, args[2], sig.args[2], types.float32, _FV))
    return f32x8(v, s, bias), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c per lane, rounded once"""
    if not (a == f32x8 and b == f32x8 and c == f32x8):
        return None

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_FV, [_FV] * 3), "llvm.fma.v8f32")
        return builder.call(fn, args)
    return f32x8(a, b, c), codegen


@intrinsic
def add(typingctx, a, b):
    """a + b per lane"""
    if not (a == f32x8 and b == f32x8):
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])
    return f32x8(a, b), codegen


@intrinsic
def zeros(typingctx):
    """F32x8 of +0.0"""
    def codegen(context, builder, sig, args):
        return ir.Constant(_FV, [0.0] * LANES)
    return f32x8(), codegen


@intrinsic
def total(typingctx, v):
    """The sum of the lanes as float32 (pairwise: lanes i and i + 4, then i and i + 2, then 0 and 1)."""
    if v != f32x8:
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        for half in (4, 2, 1):
            upper = builder.shuffle_vector(v, v, ir.Constant(_IV, [(i + half) % LANES for i in range(LANES)]))
            v = builder.fadd(v, upper)
        return builder.extract_element(v, ir.Constant(_I32, 0))
    return types.float32(v), codegen
