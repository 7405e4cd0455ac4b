"""Integer matrix products: uint8 activations by int8 weights into exact int32 sums.

What a quantized model's MatMul computes once its operands' zero points are taken out
(`graph/passes/integer_matmul.py`). Both operands are packed into uint32 words of four bytes
along k, so the micro-kernel's one operation is `dot4` (vpdpbusd): A's word broadcast, B's
words a vector of nr columns, 64 products per 512-bit instruction where float32 FMA does 16.
A is packed at every call (rows padded to whole row tiles with copies of its last row, whose
sums the output never reads); B is a weight packed into nr-column panels, which the build
precomputes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from autosched import te
from autosched.ops.epilogue import EPILOGUE_TAG, EpilogueFn, apply_epilogue
from autosched.ops.transform import INJECTIVE_TAG
from autosched.ops.util import local_accumulator, parallel_copy, tile_product
from autosched.schedule import Schedule, create_schedule
from autosched.te import Tensor
from autosched.te.expr import call

INTEGER_MATMUL_TAG = "integer_matmul"
PACK_TAG = "pack"
#: A's words, read in place by the product where k is whole words (`codegen.dot.word_source`:
#: one 32-bit load each), else packed at every call
A_WORDS_TAG = "integer_matmul_a_words"
ROWS_TAG = "integer_matmul_rows"
#: the untuned kernel's tile: (rows per register block mr, blocks per tile mb, int32 vectors of
#: columns, k steps unrolled); the template's fallback
DEFAULT_TILE = (8, 2, 2, 4)
#: bytes per packed word: the reduction runs over k in steps of four
WORD = 4


def byte_word(byte_at: Callable[[int], te.Expr], valid: Callable[[int], te.Expr] | None = None) -> te.Expr:
    """The uint32 word of four bytes, byte t = `byte_at(t)` (an int8 or uint8 element) in bits
    8t .. 8t + 7, each 0 where `valid(t)` is false."""
    word = None
    for t in range(WORD):
        x = byte_at(t)
        byte = te.cast("uint32", x if x.dtype == "uint8" else te.cast("uint8", x))
        if valid is not None:
            byte = te.select(valid(t), byte, te.const(0, "uint32"))
        part = byte if t == 0 else call("shl", byte, te.const(8 * t, "uint32"))
        word = part if word is None else call("bitor", word, part)
    assert word is not None
    return word


def integer_matmul(a: Tensor, b: Tensor, nr: int, row_block: int, epilogue: Sequence[EpilogueFn] = (),
                   name: str = "integer_matmul") -> Tensor:
    """C[..., m, n] = sum_k int32(A[..., m, k]) · int32(B[k, n]) for uint8 A and int8 B, with
    B in panels of `nr` columns and the product computed on whole row blocks of `row_block` and
    whole panels (a register tile then always runs whole vectors; the output drops the rest)."""
    if a.dtype != "uint8" or b.dtype != "int8" or a.ndim < 2 or b.ndim != 2:
        raise ValueError(f"{name}: expects uint8 A [..., m, k] and int8 B [k, n], got {a.dtype}{list(a.shape)} "
                         f"and {b.dtype}{list(b.shape)}")
    m, k = a.shape[-2:]
    if b.shape[0] != k:
        raise ValueError(f"{name}: inner dimensions differ: A{list(a.shape)} and B{list(b.shape)}")
    n, kq = b.shape[1], -(-k // WORD)
    rows = -(-m // row_block) * row_block
    batch = a.shape[:-2]

    def along_k(q, t):
        """Step t of word q along k, inside k (its padding's bytes read the last, then are 0)."""
        return te.min(q * WORD + t, k - 1) if k % WORD else q * WORD + t

    def inside(q):
        return (lambda t: q * WORD + t < k) if k % WORD else None

    def a_word(*i):
        row, q = te.min(i[-2], m - 1) if rows != m else i[-2], i[-1]
        return byte_word(lambda t: a[i[:-2] + (row, along_k(q, t))], inside(q))

    def b_word(jo, q, jl):
        col = te.min(jo * nr + jl, n - 1) if n % nr else jo * nr + jl
        return byte_word(lambda t: b[(along_k(q, t), col)], inside(q))

    ap = te.compute(batch + (rows, kq), a_word, name=f"{a.name}_words", tag=A_WORDS_TAG)
    bp = te.compute((-(-n // nr), kq, nr), b_word, name=f"{b.name}_words", tag=PACK_TAG)
    q = te.reduce_axis(kq, "q")
    cols = -(-n // nr) * nr
    c = te.compute(batch + (rows, cols), lambda *i: te.sum(te.dot4(ap[i[:-1] + (q,)], bp[i[-1] // nr, q, i[-1] % nr]), q),
                   name=name, tag=INTEGER_MATMUL_TAG, attrs={"nr": nr, "row_block": row_block, "whole_words": k % WORD == 0})
    if (rows, cols) != (m, n):
        core = c
        c = te.compute(batch + (m, n), lambda *i: core[i], name=f"{name}_rows", tag=ROWS_TAG)
    return apply_epilogue(c, epilogue)


def schedule_integer_matmul(out: Tensor, lanes: int, mr: int, mb: int = 1, k_unroll: int = 1) -> Schedule:
    """Tiles of mr · mb rows by nr columns over the threads (column panels outermost, so a
    thread's consecutive tiles read one B panel from cache), each accumulated block by block of
    mr rows in registers: k outermost, its steps unrolled `k_unroll` times, rows and vectors of
    columns unrolled. `lanes` int32 lanes per vector."""
    s = create_schedule(out)
    anchor = next(st for st in s.stages if st.op.tag == INTEGER_MATMUL_TAG)
    nr = anchor.op.attrs["nr"]
    for st in s.stages:
        if st.op is not out.op and st.op.tag in (EPILOGUE_TAG, INJECTIVE_TAG, ROWS_TAG):
            s.compute_inline(st)
        elif st.op.tag == A_WORDS_TAG and anchor.op.attrs["whole_words"]:
            s.compute_inline(st)
        elif st.op.tag in (PACK_TAG, A_WORDS_TAG):
            parallel_copy(st)
    acc = local_accumulator(s, anchor, out)
    vector = tile_product(s, s[out], acc, mr * mb, nr, lanes, whole=True)
    ci, cj = list(acc.op.axes)[-2:]
    (cq,) = acc.op.reduce_axes
    cib, cii = acc.split(ci, mr)
    cjo, cjv = acc.split(cj, vector)
    qo, qu = acc.split(cq, k_unroll)
    acc.reorder(*list(acc.op.axes)[:-2], cib, qo, qu, cii, cjo, cjv)
    acc.unroll(qu)
    acc.unroll(cii)
    acc.unroll(cjo)
    acc.vectorize(cjv)
    return s

