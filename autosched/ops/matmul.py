"""Matrix multiplication in its forms: MatMul (numpy semantics), Dense, Gemm, batched MatMul.

The compute definition takes an optional packing (mr, nr): A is repacked into mr-row panels and
B into nr-column panels, each contiguous along k, so the micro-kernel streams both operands
with unit stride and no 4 KiB aliasing between rows. Padding the panels with zeros lets the
micro-kernel run full tiles at the edges; only the final store is guarded.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autosched import te
from autosched.ops.epilogue import EPILOGUE_TAG, EpilogueFn, add, apply_epilogue, bias_add, scale
from autosched.ops.transform import INJECTIVE_TAG
from autosched.ops.util import local_accumulator, parallel_copy, tile_product
from autosched.schedule import Schedule, create_schedule
from autosched.target import CpuCapabilities
from autosched.te import Tensor

MATMUL_TAG = "matmul"
#: rows of A per register tile. Measured on a Zen 5 (AVX-512, 1 thread, matmul 1024³): 6, 8 and 10
#: rows within 2% of each other (223–229 GFLOP/s), 12 rows 152; more rows only grow the m edge (a
#: partial tile is computed whole)
MAX_PANEL_ROWS = 6
#: (rows of A, vectors of B) per register tile when A is read in place, first choice first (see
#: default_packing); each has at least 12 accumulators to hide the FMA latency. No tile of three
#: vectors: gcc reads their B vectors from memory at every FMA (12 vector loads and 4 broadcasts
#: per 12 FMAs, where two vectors' tiles keep B in registers), with 32 vector registers as with 16.
#: MLP-Mixer's 196 x 512 · 512 x 2048 ran at 112 GFLOP/s in 4 x 48 against 221 in 8 x 32 with the
#: last row tile shifted (AVX-512, EPYC Zen 4, 2 threads; 100 x 512 · 512 x 512: 116 against 219);
#: on an AVX2 EPYC Zen 3 (2 threads, the template's kernels alone) 4 x 24 against 6 x 16 in place,
#: its last row tile shifted where 6 does not divide m: BERT's 128 x 768 · 768 x 768 1.91-1.96 ms
#: against 1.07-1.08, 128 x 3072 · 3072 x 768 7.8-8.1 against 4.6-5.1, the MLP's 64 x 1024 ·
#: 1024 x 1024 1.06-1.30 against 0.93-0.97, Swin's 3136 x 384 · 384 x 96 2.6-3.9 against 1.4-1.7
UNPACKED_TILES = ((8, 2), (6, 2))
#: the packed tile's time over an in-place tile's of the same shape (packing A's copy; ~6% on
#: the measurements in default_packing), against which the in-place tiles' column padding weighs
PACKING_COST = 1.06
#: Intel's AVX-512 cores: (rows of A, vectors of B) of the register tile of a wide, deep MatMul,
#: its reduction in blocks of WIDE_K_BLOCKS (the first that divides k), under WIDE_MIN_N columns
#: and WIDE_MIN_K reductions the default tiles. Measured on a Sapphire Rapids-class Xeon, 2 threads,
#: each config timed twice (`wide_k_block`); AMD's cores keep the tiles above until measured there
WIDE_TILE = (8, 3)
WIDE_K_BLOCKS = (256, 128)
WIDE_MIN_N = 256
WIDE_MIN_K = 384
#: rows of A below which its copy costs too little to matter (`narrow_in_place_tile`)
NARROW_MIN_ROWS = 64


@dataclass(frozen=True)
class Packing:
    """Panel sizes of the packed layout: mr rows of A, nr columns of B per panel.

    `pack_a=False` leaves A as it is (the micro-kernel broadcasts from mr row streams, as
    MLAS's does): B is a weight packed once at build time, but A is packed at every call, a
    strided copy of the activations; it needs mr to divide m, since an unpacked A has no
    zero rows to pad its last tile with.
    """
    mr: int
    nr: int
    pack_a: bool = True
    # row tiles that mr does not divide end at m, the last moved back over rows the one before it
    # computed (the templates' `Stage.split(shift=True)`): an unpacked A then needs no padding
    shifted: bool = False


def matmul(a: Tensor, b: Tensor, trans_a: bool = False, trans_b: bool = False,
           epilogue: Sequence[EpilogueFn] = (), packing: Packing | None = None, name: str = "matmul") -> Tensor:
    """C[..., m, n] = sum_k A[..., m, k] · B[..., k, n]; leading (batch) dims broadcast like numpy.

    A 1-D or 2-D operand on either side is the plain matrix case; 3-D operands are batched.
    """
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{name}: operands must have at least 2 dimensions, got {a.shape} and {b.shape}")
    m, ka = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    n, kb = (b.shape[-2], b.shape[-1]) if trans_b else (b.shape[-1], b.shape[-2])
    if ka != kb:
        raise ValueError(f"{name}: inner dimensions differ: A{list(a.shape)} (k={ka}) and B{list(b.shape)} (k={kb})")
    batch = _broadcast(a.shape[:-2], b.shape[:-2], name)
    nb = len(batch)
    k = te.reduce_axis(ka, "k")

    def bidx(t: Tensor, i: tuple) -> tuple:
        off = nb - (t.ndim - 2)
        return tuple(0 if t.shape[d] == 1 else i[off + d] for d in range(t.ndim - 2))

    if packing is None:
        def a_at(i, m_, k_):
            return a[bidx(a, i) + ((k_, m_) if trans_a else (m_, k_))]

        def b_at(i, k_, n_):
            return b[bidx(b, i) + ((n_, k_) if trans_b else (k_, n_))]
    else:
        mr, nr = packing.mr, packing.nr
        if not packing.pack_a and m % mr and not packing.shifted:
            raise ValueError(f"{name}: an unpacked A needs the panel rows ({mr}) to divide m ({m})")
        ap = te.compute(a.shape[:-2] + (-(-m // mr), ka, mr),
                        lambda *i: _panel(a, i[:-3], i[-3] * mr + i[-1], i[-2], m, mr, trans_a),
                        name=f"{a.name}_packed", tag="pack")
        bp = te.compute(b.shape[:-2] + (-(-n // nr), ka, nr),
                        lambda *i: _panel(b, i[:-3], i[-3] * nr + i[-1], i[-2], n, nr, not trans_b),
                        name=f"{b.name}_packed", tag="pack")

        def a_at(i, m_, k_):
            if not packing.pack_a:
                return a[bidx(a, i) + ((k_, m_) if trans_a else (m_, k_))]
            return ap[bidx(a, i) + (m_ // mr, k_, m_ % mr)]

        def b_at(i, k_, n_):
            return bp[bidx(b, i) + (n_ // nr, k_, n_ % nr)]

    c = te.compute(batch + (m, n), lambda *i: te.sum(a_at(i[:-2], i[-2], k) * b_at(i[:-2], k, i[-1]), k),
                   name=name, tag=MATMUL_TAG, attrs={"packing": packing})
    return apply_epilogue(c, epilogue)


def _panel(t: Tensor, batch_idx: tuple, row, k, extent: int, width: int, transposed: bool):
    """t's element at (row, k) — or (k, row) when `transposed` — and 0 in the padding of the last panel.

    The padding reads the last row (then selects 0): an index known to stay below `extent`
    simplifies through the views of `t` (a reshape's `row // extent` is 0), where a guarded
    `row` left a division and a remainder per element of the copy. Swin's 49-token K panels,
    packed through a transpose, slice and reshape view, cost more than the product reading them."""
    if extent % width == 0:
        return t[tuple(batch_idx) + ((k, row) if transposed else (row, k))]
    inside = te.min(row, extent - 1)
    idx = tuple(batch_idx) + ((k, inside) if transposed else (inside, k))
    return te.select(row < extent, t[idx], te.const(0, t.dtype))


def _broadcast(sa: tuple, sb: tuple, name: str) -> tuple:
    out = []
    for k in range(max(len(sa), len(sb))):
        x = sa[len(sa) - 1 - k] if k < len(sa) else 1
        y = sb[len(sb) - 1 - k] if k < len(sb) else 1
        if x != y and 1 not in (x, y):
            raise ValueError(f"{name}: batch dimensions {sa} and {sb} do not broadcast")
        out.append(max(x, y))
    return tuple(reversed(out))


def dense(x: Tensor, w: Tensor, bias: Tensor | None = None, epilogue: Sequence[EpilogueFn] = (),
          packing: Packing | None = None) -> Tensor:
    """y = x · wᵀ (+ bias): the fully connected layer, weights stored [out, in]."""
    pre = (bias_add(bias, 1),) if bias is not None else ()
    return matmul(x, w, trans_b=True, epilogue=pre + tuple(epilogue), packing=packing, name="dense")


def gemm(a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
         trans_a: bool = False, trans_b: bool = False, epilogue: Sequence[EpilogueFn] = (),
         packing: Packing | None = None) -> Tensor:
    """ONNX Gemm: alpha · A' · B' + beta · C, with C broadcast to the output."""
    pre: list[EpilogueFn] = []
    if alpha != 1.0:
        pre.append(scale(alpha))
    if c is not None and beta != 0.0:
        cc = c if beta == 1.0 else te.compute(c.shape, lambda *i: c[i] * te.const(beta, c.dtype), name="gemm_beta_c")
        pre.append(add(cc))
    return matmul(a, b, trans_a, trans_b, tuple(pre) + tuple(epilogue), packing, name="gemm")


def wide_k_block(m: int, n: int, k: int, caps: CpuCapabilities, dtype_bytes: int = 4) -> int | None:
    """The reduction block of the WIDE_TILE where it applies, else None. On Intel's AVX-512 cores
    (a Sapphire Rapids-class Xeon, 2 threads) 8 × 48 tiles of 256- or 128-deep blocks against the
    default tiles of the whole reduction: ViT-S's MLP 197×384·384×1536 1.20×, 197×1536·1536×384
    1.42×, its projection 197×384·384×384 1.30×, QKV ·384×1152 1.03×; BERT's 128×768·768×768 1.21×
    and 1.25×, FFN ·768×3072 1.12×, ·3072×768 1.21×; the MLP's 64×1024·1024×1024 1.19×. Attention's
    products (n or k of 64-197) ran 0.42-0.74× in the wide tile, and so did the MLP's
    64×784·784×1024 over its whole reduction (0.69×: its B panel of 784 × 48 floats outgrows the L1):
    a reduction neither block divides takes the largest block between them of whole 4-deep steps
    that does, 196 for 784 (the MLP's layer 0.356-0.366 ms against 0.382-0.394 in the default
    tile, each config twice in one batch, 6 rounds; the MLP 1.04x in the model) and 172 for the
    LLaMA block's 1376 (1.01x). Attention's products keep the default, and so does a product of
    fewer rows than the tile's (a classifier's one row)."""
    lanes = caps.lanes(dtype_bytes)
    rows, vectors = WIDE_TILE
    if caps.vendor != "intel" or rows * vectors + vectors + 1 > caps.vector_registers or lanes == 1:
        return None
    if m < rows or n < max(WIDE_MIN_N, vectors * lanes) or k < WIDE_MIN_K:
        return None
    # 3 blocks or more; else the largest block of whole 4-deep steps between the two that divides k
    listed = next((b for b in WIDE_K_BLOCKS if k % b == 0 and k >= 3 * b), None)
    lo, hi = min(WIDE_K_BLOCKS), max(WIDE_K_BLOCKS)
    return listed or next((b for b in range(hi - hi % 4, lo - 1, -4) if k % b == 0 and k >= 3 * b), None)


def narrow_in_place_tile(m: int, n: int, caps: CpuCapabilities, dtype_bytes: int = 4) -> Packing | None:
    """The register tile that reads A in place, its last row tile shifted back where the rows do
    not divide m (the templates' shifted split; guarded before 2026-11-28), for
    a product of at least NARROW_MIN_ROWS rows whose n columns fit one panel of at most 4
    vectors (one vector each, where the last vector is partial), else None. Packing A pays where
    many column panels reuse it; with one panel it is a copy of all of A for nothing. ViT-S's
    attention, softmax(QKᵀ)·V over 6 heads of 197×197·197×64, AVX-512, 2 threads, each config
    timed twice: 0.322 and 0.287 ms with A packed in 6 × 32 tiles (no in-place tile divides 197
    rows), 0.131 and 0.144 in place in 6 × 64, 0.168 and 0.132 in 4 × 64; AVX2 code on the same
    host, 6 heads of ·197×32, ·197×24 and ·197×16: 0.14-0.16, 0.12-0.14 and 0.06-0.11 ms in place
    (2 × 32, 4 × 24, 6 × 16) against 0.18-0.28, 0.18-0.29 and 0.18-0.31 packed in 6 × 16. Only the templates
    shift rows (the op library's in-place tiles must divide m)."""
    lanes = caps.lanes(dtype_bytes)
    vectors = -(-n // lanes)
    if lanes == 1 or vectors > 4 or m < NARROW_MIN_ROWS:
        return None
    if n % lanes and vectors > 1:
        # a panel whose last vector is partial: panels of one vector. AVX-512, EPYC Zen 4, 2
        # threads, in the model: a conformer's attention, 4 heads of 100×100·100×36, 0.12 ms in
        # 8 × 48, 0.035 in 8 × 32, 0.023 in 8 × 16; 6 heads of 197×197·197×40, 0.87 ms in 8 × 48,
        # 0.21 in 8 × 32, 0.15 in 8 × 16, where ·197×48 runs 0.13 in 8 × 48 and in 8 × 16 (and
        # AVX2's 4 × 24 beats 8 × 8 on ·197×24: 0.069 against 0.084 ms)
        vectors = 1
    rows = next((r for r in (8, 6, 4, 2) if r * vectors + vectors + 1 <= caps.vector_registers), None)
    return Packing(mr=rows, nr=vectors * lanes, pack_a=False) if rows else None


def shifted_in_place_tile(m: int, n: int, caps: CpuCapabilities, dtype_bytes: int = 4) -> Packing | None:
    """The in-place register tile of `default_packing` for rows that none of UNPACKED_TILES
    divides (ViT's 197 tokens), its last row tile shifted back instead of A packed: the first of
    them whose accumulators fit and whose columns pad n least, on at least two tiles of rows;
    None for a B narrower than two vectors (`narrow_in_place_tile` has those). ViT-S's MLP and
    projections (197 rows, AVX-512, EPYC Zen 4, 2 threads) ran at 153-180 GFLOP/s with A packed
    in 6 × 32, where the same products on 128 rows in place in 8 × 32 ran at 212-228 (the llama
    block); in place with the last tile shifted, 0.80-0.96 of the packed time (summed kernels
    0.92). With AVX2's 16 registers the tile is 6 × 16 (figures at UNPACKED_TILES)."""
    lanes = caps.lanes(dtype_bytes)
    if n < 2 * lanes:
        return None
    options = [(_padded(n, width * lanes), rank, Packing(mr=rows, nr=width * lanes, pack_a=False, shifted=True))
               for rank, (rows, width) in enumerate(UNPACKED_TILES)
               if rows * width + width + 1 <= caps.vector_registers and n >= width * lanes and m >= 2 * rows]
    return min(options)[2] if options else None


def default_packing(m: int, n: int, caps: CpuCapabilities, dtype_bytes: int = 4, trans_a: bool = False,
                    k: int | None = None) -> Packing:
    """The BLIS-style register tile of the target: nr is two vectors wide, and mr rows are as many
    as leave, beside their 2·mr accumulators, registers for the two B vectors and the broadcast
    A element (6×16 floats with AVX2's 16 ymm registers, 6×32 with AVX-512's 32 zmm).

    `trans_a`: A is not row-major as the kernel reads it (transposed, or seen through a view), so
    it is packed. Otherwise A is read in place (packing it is a strided copy of the activations
    at every call) with the tile of UNPACKED_TILES whose rows divide m, whose accumulators, B
    vectors and broadcast fit the registers, and whose columns pad n least (first listed on a
    tie), unless that padding costs more than packing (PACKING_COST) with the packed tile. Given
    the reduction `k`, on Intel's AVX-512 cores a wide, deep product takes the WIDE_TILE
    (`wide_k_block`), packed where the default packs. Measured on a Zen 5, BERT's
    128×3072·3072×768: AVX-512, 2 threads: 6×32 packed 1.33 ms, 8×32 packed 1.26, 8×32 in
    place 1.19; AVX2 code (-mcpu=haswell), 1 thread: 6×16 packed 5.24 ms, 4×24 in place 4.89,
    4×16 in place 5.51 (MLP's 64×1024·1024×1024: 1.13, 1.07, 1.16).
    """
    lanes = caps.lanes(dtype_bytes)
    if k is not None and wide_k_block(m, n, k, caps, dtype_bytes) is not None:
        default = default_packing(m, n, caps, dtype_bytes, trans_a)
        rows, vectors = WIDE_TILE
        if default.pack_a or m % rows == 0:  # in place only where the rows divide m
            return Packing(mr=rows, nr=vectors * lanes, pack_a=default.pack_a)
        return default
    vectors = 2 if n >= 2 * lanes else 1
    nr = vectors * lanes if n >= lanes else max(1, n)
    mr = max(1, min(MAX_PANEL_ROWS, (caps.vector_registers - vectors - 1) // vectors, m))
    packed = Packing(mr=mr, nr=nr)
    if trans_a:
        return packed
    if m < MAX_PANEL_ROWS:  # fewer rows than a panel (a recurrent step's 1 x H): packing them is
        # one more parallel region a call for nothing; an LSTM step's 1x128·128x512 ran 8-9 µs
        # packed, 4 µs in place (AVX-512, 2 threads)
        return Packing(mr=m, nr=nr, pack_a=False)
    # a narrow B (one vector or less) has room for rows: the tiles of one vector
    tiles: tuple[tuple[int, int], ...] = UNPACKED_TILES if vectors == 2 else ((8, 1), (6, 1))
    options = []  # (work computed per useful output, preference, tile)
    for rank, (rows, width) in enumerate(tiles):
        fits = rows * width + width + 1 <= caps.vector_registers
        if fits and (width == 1 or n >= width * lanes) and m % rows == 0:
            tile = Packing(mr=rows, nr=nr if width == 1 else width * lanes, pack_a=False)
            options.append((_padded(n, tile.nr), rank, tile))
    if options and min(options)[0] <= PACKING_COST * _padded(m, mr) * _padded(n, nr):
        return min(options)[2]
    return packed


def _padded(extent: int, block: int) -> float:
    """Work on `extent` in whole blocks, per useful element (1.0: no padding)."""
    return -(-extent // block) * block / extent


def schedule_matmul(out: Tensor, vector_lanes: int) -> Schedule:
    """A register-tiled, vectorized, parallel schedule for a packed matmul and its epilogue.

    Output tiles of mr × nr are computed in a local accumulator (k outermost, rows and vector
    columns unrolled), panels are packed in parallel, tiles are distributed over threads with
    the column panel outermost so consecutive tiles reuse the packed B panel from cache.
    """
    s = create_schedule(out)
    anchor = next(t for t in te.post_order([out]) if getattr(t.op, "tag", "") == MATMUL_TAG)
    packing: Packing | None = anchor.compute_op.attrs.get("packing")
    mr, nr = (packing.mr, packing.nr) if packing else (1, min(anchor.shape[-1], vector_lanes))
    for st in s.stages:
        if st.op.tag in (EPILOGUE_TAG, INJECTIVE_TAG) and st.op is not out.op:
            s.compute_inline(st)  # the epilogue into the output; operand views into the packing
        elif st.op.tag == "pack" or st.op.name == "gemm_beta_c":
            parallel_copy(st)
    acc_stage = local_accumulator(s, s[anchor], out)
    lanes = tile_product(s, s[out], acc_stage, mr, nr, vector_lanes)
    ci, cj = acc_stage.op.axes[-2:]
    (ck,) = acc_stage.op.reduce_axes
    cjo, cjv = acc_stage.split(cj, lanes)
    acc_stage.reorder(*acc_stage.op.axes[:-2], ck, ci, cjo, cjv)
    acc_stage.unroll(ci)
    acc_stage.unroll(cjo)
    acc_stage.vectorize(cjv)
    return s
