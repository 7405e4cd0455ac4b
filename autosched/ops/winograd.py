"""Winograd convolution F(m×m, 3×3) for 3×3, stride-1, ungrouped convolutions of any dilation.

Each m×m output tile comes from an (m+2)×(m+2) input tile d: Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A
(Lavin & Gray 2015). Summed over input channels, the elementwise product becomes one GEMM per
tile position (ε, ν): M[ε,ν] = V[ε,ν] · U[ε,ν] over channels, which does (m+2)²/(9 m²) of the
direct convolution's multiplications (0.44× for m = 2, 0.25× for m = 4, 0.20× for m = 6) at
the cost of the transforms and of rounding error that grows with m.

The transform matrices are generated (not pasted) from interpolation points by Cook–Toom: Aᵀ is
the Vandermonde matrix of the points (plus the point at infinity), G the Lagrange-scaled
Vandermonde, and Bᵀ is solved from the identity Aᵀ[(G g) ⊙ (Bᵀ d)] = correlate(d, g) for every
d and g, so any point set works.

Measured error, max |y - y64| / max |y| of a float32 Winograd (transforms and products rounded
to float32) against a float64 direct convolution on standard-normal data (32–64 output channels,
the worst of 3–6 seeds; the simulation is `_float32_winograd` in tests/test_winograd.py):

    points                 C=128     C=512
    F(2,3) 0, ±1           5.2e-7    9.8e-7
    F(4,3) 0, ±1, ±2       1.0e-5    9.9e-6
    F(4,3) 0, ±1, ±1/2     9.2e-6      —
    F(4,3) 0, ±1, 2, -1/2  3.9e-6    5.0e-6
    F(6,3) 0, ±1, ±2, ±1/2 1.6e-5    3.1e-5

so F(4,3) uses 0, ±1, 2, -1/2 (`POINTS`): half the error of the textbook 0, ±1, ±2, for a
denser Bᵀ (26 non-zeros against 22, so a dearer input transform). F(6,3) (20×20 inputs, 3
seeds) with 0, ±1, ±2, 1/2, -1/4 rounds to 4.3e-5 and 6.2e-5, with 0, ±1, ±1/2, 2, -1/4 to
2.2e-4 and 4.4e-4, so it takes the symmetric set. All are inside the check's tolerance (rtol
1e-3, atol 1e-4 per unit of max |y|).

Every transform is written out as sparse sums with constant coefficients (zeros dropped, ±1
without a multiplication), selected per tile position by a chain of `select`s on the position
indices: schedules unroll those loops, the conditions become constants and gcc folds the
chain, so a transform costs its non-zero terms only.

A convolution of dilation d reads, for output row p + d·r, the input rows p + d·(r + k): the
rows of one phase p = y mod d, d apart. Each phase of rows and columns is then an undilated
convolution of its own (the space-to-batch identity that TensorFlow's atrous convolution uses),
so the tiles are cut per phase, m phase rows (m·d rows apart) each, and a tile reads its
(m+2)² inputs d apart. Tile row R covers phase R // TH₁ and phase rows from (R mod TH₁)·m, TH₁ =
⌈⌈OH/d⌉/m⌉ tiles per phase: d·TH₁ tile rows in all, the same GEMM over more, smaller-spaced
tiles, and no copy of the input into phases.

Stages (tags): "pad" (the input grown to whole tiles; absent when nothing to pad),
"winograd_weight" U[ε,ν,OC/bo,C,bo] (reads only weights: `autosched.compile.model` precomputes it at
build time; "winograd_weight_rows" is its first 1-D pass G g), "winograd_input_rows" (d B) and "winograd_input" V[ε,ν,C/bi,T,bi] (Bᵀ d B),
"winograd_gemm" M[ε,ν,OC/bo,T,bo], "winograd_output_rows" (M A) and "winograd_output"
Y[N,OC/bo,OH,OW,bo] (Aᵀ M A) with bias and epilogue. T = N·⌈OH/m⌉·⌈OW/m⌉ tiles (rounded up to
a multiple of the GEMM's register tile: `gemm_tile`). The input and output transforms run as
two 1-D passes each (about half the terms of the 2-D sums).
"""
from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import cache

import numpy as np

from autosched import te
from autosched.ops.conv import conv_geometry
from autosched.ops.conv_nchwc import pack_data, pack_weights, unpack_nchw, whole_blocks
from autosched.ops.epilogue import EpilogueFn, apply_epilogue
from autosched.ops.transform import pad
from autosched.te import Expr, Tensor

WEIGHT_TAG = "winograd_weight"
INPUT_TAG = "winograd_input"
INPUT_ROWS_TAG = "winograd_input_rows"
WEIGHT_ROWS_TAG = "winograd_weight_rows"
OUTPUT_ROWS_TAG = "winograd_output_rows"
GEMM_TAG = "winograd_gemm"
OUTPUT_TAG = "winograd_output"
KERNEL = 3
#: interpolation points per output tile size m (the point at infinity is always added)
POINTS: dict[int, tuple[Fraction, ...]] = {
    2: (Fraction(0), Fraction(1), Fraction(-1)),
    4: (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-1, 2)),
    6: (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2)),
}
TILE_SIZES = tuple(POINTS)


@cache
def winograd_matrices(m: int, points: tuple[Fraction, ...] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Aᵀ [m, α], G [α, 3], Bᵀ [α, α]) in float64 for F(m, 3), α = m + 2, from α - 1 finite points.

    Aᵀ[i, j] = p_j^i and G[j, k] = p_j^k / Π_{l≠j}(p_j - p_l) for the finite points, and the
    point at infinity contributes the last column of Aᵀ (e_{m-1}) and the last row of G (e_2).
    Bᵀ is the exact (rational) solution of the correlation identity, solved column by column.
    """
    pts = tuple(Fraction(p) for p in (POINTS[m] if points is None else points))
    alpha = m + KERNEL - 1
    if len(pts) != alpha - 1 or len(set(pts)) != len(pts):
        raise ValueError(f"F({m},3) needs {alpha - 1} distinct finite points, got {pts}")
    at = [[p ** i for p in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = []
    for j, p in enumerate(pts):
        f = Fraction(1)
        for r, q in enumerate(pts):
            if r != j:
                f *= p - q
        g.append([p ** k / f for k in range(KERNEL)])
    g.append([Fraction(int(k == KERNEL - 1)) for k in range(KERNEL)])
    # Σ_j At[i,j] G[j,k] Bt[j,l] = [l == i + k] for all i < m, k < 3: α unknowns per column l
    rows = [[at[i][j] * g[j][k] for j in range(alpha)] for i in range(m) for k in range(KERNEL)]
    bt = [[Fraction(0)] * alpha for _ in range(alpha)]
    for col in range(alpha):
        rhs = [Fraction(int(col == i + k)) for i in range(m) for k in range(KERNEL)]
        for j, v in enumerate(_solve_exact(rows, rhs, alpha)):
            bt[j][col] = v
    at_f, g_f, bt_f = (np.array([[float(v) for v in r] for r in mat]) for mat in (at, g, bt))
    return at_f, g_f, bt_f


def _solve_exact(rows: list[list[Fraction]], rhs: list[Fraction], n: int) -> list[Fraction]:
    """The solution of an overdetermined but consistent rational system, by Gauss–Jordan."""
    aug = [r[:] + [b] for r, b in zip(rows, rhs)]
    piv_cols, r = [], 0
    for c in range(n):
        p = next((i for i in range(r, len(aug)) if aug[i][c] != 0), None)
        if p is None:
            continue
        aug[r], aug[p] = aug[p], aug[r]
        aug[r] = [v / aug[r][c] for v in aug[r]]
        for i in range(len(aug)):
            if i != r and aug[i][c] != 0:
                f = aug[i][c]
                aug[i] = [a - f * b for a, b in zip(aug[i], aug[r])]
        piv_cols.append(c)
        r += 1
    if len(piv_cols) != n or any(row[n] != 0 for row in aug[r:]):
        raise ValueError("the Winograd identity has no unique solution for these points")
    return [aug[i][n] for i in range(n)]


def _combine(terms: Sequence[tuple[float, Expr]], dtype: str) -> Expr:
    """Σ c·e over the non-zero coefficients, with ±1 as a plain add or subtract."""
    terms = sorted(((c, e) for c, e in terms if c != 0), key=lambda ce: ce[0] < 0)  # stable: positives first
    out: Expr | None = None
    for c, e in terms:
        if out is None:  # no negation: vector code has no cheap unary minus
            out = e if c == 1 else e * te.const(c, dtype)
        elif c == 1:
            out = out + e
        elif c == -1:
            out = out - e
        else:
            out = out + e * te.const(c, dtype)
    return out if out is not None else te.const(0, dtype)


def _by_position(i: Expr, j: Expr, ni: int, nj: int, value) -> Expr:
    """value(a, b) at (a, b) = (i, j): a select chain the schedule's unrolling turns into constants."""
    def row(a: int) -> Expr:
        out = value(a, nj - 1)
        for b in reversed(range(nj - 1)):
            out = te.select(j.equal(b), value(a, b), out)
        return out
    out = row(ni - 1)
    for a in reversed(range(ni - 1)):
        out = te.select(i.equal(a), row(a), out)
    return out


def _by_index(i: Expr, n: int, value) -> Expr:
    """value(a) at a = i, as `_by_position` for one index."""
    return _by_position(i, i, 1, n, lambda _, a: value(a))


def tile_counts(oh: int, ow: int, m: int, dilation: Sequence[int] = (1, 1)) -> tuple[int, int]:
    """Tile rows and columns: d phases of ⌈⌈size/d⌉/m⌉ tiles along an axis of dilation d."""
    th, tw = (d * _ceil_div(_ceil_div(size, d), m) for size, d in zip((oh, ow), dilation))
    return th, tw


def gemm_tile(count: int, wanted: int) -> int:
    """Tiles per GEMM register tile for `wanted` of `count` tiles: the largest divisor of the
    count not above `wanted` where it is at least half of it, else `wanted` itself, for which
    `input_transform` rounds the count up (the repeats of the last tile feed GEMM rows that the
    output transform never reads). Divisors alone left awkward counts one tile per register
    tile: F(4) on Inception-v3's 147×147 maps (1369 = 37² tiles), F(6) on 112×112 (361)."""
    wanted = min(wanted, count)
    divisor = max(d for d in range(1, wanted + 1) if count % d == 0)
    return divisor if 2 * divisor >= wanted else wanted


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _tile_origin(index: Expr, tiles: int, m: int, d: int) -> Expr:
    """The padded input's first row (or column) read by tile row (column) `index` of `tiles`."""
    if d == 1:
        return index * m
    per_phase = tiles // d
    return index // per_phase + index % per_phase * (m * d)


def _tile_position(y: Expr, tiles: int, m: int, d: int) -> tuple[Expr, Expr]:
    """(tile row, row within the tile) of output row `y`; likewise for columns."""
    if d == 1:
        return y // m, y % m
    r = y // d
    return y % d * (tiles // d) + r // m, r % m


def check_eligible(x_shape: Sequence[int], w_shape: Sequence[int], stride, dilation, m: int) -> None:
    if m not in POINTS:
        raise ValueError(f"winograd: tile size {m} not in {TILE_SIZES}")
    if tuple(w_shape[2:]) != (KERNEL, KERNEL):
        raise ValueError(f"winograd: only 3x3 kernels, got weights {list(w_shape)}")
    if tuple(np.broadcast_to(stride, 2)) != (1, 1):
        raise ValueError(f"winograd: only stride 1, got {stride}")
    if min(np.broadcast_to(dilation, 2)) < 1:
        raise ValueError(f"winograd: dilation must be positive, got {dilation}")


def weight_transform(w: Tensor, m: int, oc_bn: int) -> Tensor:
    """U[ε, ν, OC/oc_bn, C, oc_bn] = (G g Gᵀ)[ε, ν] per (output, input) channel pair, from the
    weights packed to [OC/oc_bn, C, 3, 3, oc_bn] first (tag "pack") so a vector of output
    channels is one load, not a gather across OIHW rows."""
    oc, c = w.shape[:2]
    _, g, _ = winograd_matrices(m)
    alpha = m + 2
    wp = pack_weights(w, oc_bn, None)
    # two 1-D passes, as in `input_transform`: G g (tag "winograd_weight_rows"), then · Gᵀ
    g_w = te.compute((alpha, KERNEL, oc // oc_bn, c, oc_bn), lambda e, kw, o, i, ob: _by_index(e, alpha, lambda a: _combine(
        [(g[a, k], wp[o, i, k, kw, ob]) for k in range(KERNEL)], w.dtype)), name=f"{w.name}_winograd_rows",
        tag=WEIGHT_ROWS_TAG, attrs={"m": m})
    return te.compute((alpha, alpha, oc // oc_bn, c, oc_bn), lambda e, n, o, i, ob: _by_index(n, alpha, lambda b: _combine(
        [(g[b, k], g_w[e, k, o, i, ob]) for k in range(KERNEL)], w.dtype)), name=f"{w.name}_winograd", tag=WEIGHT_TAG,
        attrs={"m": m})


def input_transform(xp: Tensor, m: int, tiles: tuple[int, int], dilation: Sequence[int] = (1, 1),
                    tile_multiple: int = 1) -> Tensor:
    """V[ε, ν, C/bi, T, bi] = (Bᵀ d B)[ε, ν] for each tile t = (n·TH + th)·TW + tw of the padded input
    (of `tile_counts`, per phase of the dilation), T rounded up to a multiple of
    `gemm_tile(T, tile_multiple)`, the tiles past the last one repeating it.

    Two 1-D passes (tag "winograd_input_rows" for d B, then Bᵀ ·): 2·α·nnz(Bᵀ) terms per tile
    and channel instead of nnz(Bᵀ)² (312 against 676 for F(4,3)); schedules compute the first
    pass per tile, in registers or L1.
    """
    n, cb, _, _, bi = xp.shape
    th_, tw_ = tiles
    _, _, bt = winograd_matrices(m)
    alpha = m + 2

    dh, dw = dilation

    count = n * th_ * tw_
    multiple = gemm_tile(count, tile_multiple)
    padded = _ceil_div(count, multiple) * multiple

    def rows(i, nu, c, t, ci):
        if padded > count:
            t = te.min(t, count - 1)
        b = t // (th_ * tw_)
        y, x = _tile_origin((t // tw_) % th_, th_, m, dh), _tile_origin(t % tw_, tw_, m, dw)
        return _by_index(nu, alpha, lambda q: _combine(
            [(bt[q, j], xp[b, c, y + i * dh, x + j * dw, ci]) for j in range(alpha)], xp.dtype))
    d_b = te.compute((alpha, alpha, cb, padded, bi), rows, name=f"{xp.name}_winograd_rows",
                     tag=INPUT_ROWS_TAG, attrs={"m": m})

    def body(e, nu, c, t, ci):
        return _by_index(e, alpha, lambda a: _combine(
            [(bt[a, i], d_b[i, nu, c, t, ci]) for i in range(alpha)], xp.dtype))
    return te.compute((alpha, alpha, cb, padded, bi), body, name=f"{xp.name}_winograd", tag=INPUT_TAG,
                      attrs={"m": m})


def batched_gemm(v: Tensor, u: Tensor) -> Tensor:
    """M[ε, ν, OC/bo, T, bo] = Σ_c V[ε, ν, c/bi, T, c%bi] · U[ε, ν, OC/bo, c, bo]: a GEMM per tile position."""
    alpha, _, cb, t, bi = v.shape
    _, _, ocb, _, bo = u.shape
    rc, ri = te.reduce_axis(cb, "icc"), te.reduce_axis(bi, "icb")
    return te.compute((alpha, alpha, ocb, t, bo),
                      lambda e, n, o, p, ob: te.sum(v[e, n, rc, p, ri] * u[e, n, o, rc * bi + ri, ob], [rc, ri]),
                      name="winograd_gemm", tag=GEMM_TAG)


def output_transform(mm: Tensor, n: int, out_hw: tuple[int, int], m: int, bias: Tensor | None = None,
                     epilogue: Sequence[EpilogueFn] = (), name: str = "conv2d", dilation: Sequence[int] = (1, 1)
                     ) -> Tensor:
    """Y[N, OC/bo, OH, OW, bo] = (Aᵀ M A)[oh % m, ow % m] of tile (oh / m, ow / m) (per phase of
    the dilation), + bias, epilogue."""
    alpha, _, ocb, _, bo = mm.shape
    oh_, ow_ = out_hw
    dh, dw = dilation = tuple(dilation)
    th_, tw_ = tiles = tile_counts(oh_, ow_, m, dilation)
    at, _, _ = winograd_matrices(m)

    # two 1-D passes, as in `input_transform`: M A per tile (tag "winograd_output_rows"), then Aᵀ ·
    m_a = te.compute((alpha, m, ocb, mm.shape[3], bo), lambda e, j, o, t, ob: _by_index(j, m, lambda jj: _combine(
        [(at[jj, q], mm[e, q, o, t, ob]) for q in range(alpha)], mm.dtype)), name=f"{name}_winograd_out_rows",
        tag=OUTPUT_ROWS_TAG, attrs={"m": m})

    def body(b, o, y, x, ob):
        (ty, iy), (tx, ix) = _tile_position(y, th_, m, dh), _tile_position(x, tw_, m, dw)
        t = (b * th_ + ty) * tw_ + tx
        v = _by_index(iy, m, lambda i: _combine([(at[i, e], m_a[e, ix, o, t, ob]) for e in range(alpha)],
                                                mm.dtype))
        return v + bias[o * bo + ob] if bias is not None else v
    y = te.compute((n, ocb, oh_, ow_, bo), body, name=f"{name}_winograd_out", tag=OUTPUT_TAG,
                   attrs={"m": m, "tiles": tiles, "dilation": dilation})
    return apply_epilogue(y, epilogue)


def conv2d_winograd_nchwc(x: Tensor, w: Tensor, bias: Tensor | None = None, padding: int | Sequence[int] = 1,
                          dilation: int | Sequence[int] = 1, *, m: int, oc_bn: int, tile_multiple: int = 1,
                          epilogue: Sequence[EpilogueFn] = (), name: str = "conv2d") -> Tensor:
    """conv2d of x in NCHW[bi]c ([N, C/bi, H, W, bi]) with OIHW weights, in NCHW[oc_bn]c.

    `epilogue` functions receive the blocked indices (n, oc/oc_bn, oh, ow, oc%oc_bn); `bias`
    is [OC] and added before them. The GEMM's tile count is a multiple of `tile_multiple`
    (`input_transform`).
    """
    if x.ndim != 5 or w.ndim != 4:
        raise ValueError(f"{name}: expects NCHW[x]c input and OIHW weights, got {list(x.shape)} and {list(w.shape)}")
    n, cb, h, wd, bi = x.shape
    oc, c = w.shape[:2]
    if c != cb * bi:
        raise ValueError(f"{name}: {cb}x{bi} input channels but weights {list(w.shape)}")
    if oc_bn < 1 or oc % oc_bn:
        raise ValueError(f"{name}: output channel block {oc_bn} does not divide {oc} channels")
    check_eligible(x.shape, w.shape, 1, dilation, m)
    dil = tuple(int(v) for v in np.broadcast_to(dilation, 2))
    flat = te.placeholder((n, c, h, wd), x.dtype, name="shape_only")
    _, _, (top, left, bottom, right), (oh_, ow_), _ = conv_geometry(flat, w, 1, padding, dil, name)
    tiles = tile_counts(oh_, ow_, m, dil)
    # whole tiles: rows and columns past the padding read zeros
    hp, wp = tiles[0] * m + 2 * dil[0], tiles[1] * m + 2 * dil[1]
    pads = ((0, 0), (0, 0), (top, hp - h - top), (left, wp - wd - left), (0, 0))
    xp = pad(x, pads, name=f"{name}_pad") if any(b or a for b, a in pads) else x
    u = weight_transform(w, m, oc_bn)
    v = input_transform(xp, m, tiles, dil, tile_multiple)
    return output_transform(batched_gemm(v, u), n, (oh_, ow_), m, bias, epilogue, name, dil)


def conv2d_winograd(x: Tensor, w: Tensor, bias: Tensor | None = None, padding: int | Sequence[int] = 1,
                    dilation: int | Sequence[int] = 1, *, m: int, ic_bn: int, oc_bn: int, tile_multiple: int = 1,
                    epilogue: Sequence[EpilogueFn] = (), name: str = "conv2d") -> Tensor:
    """The NCHW result: x packed to NCHW[ic_bn]c (tag "pack"), the blocked Winograd convolution,
    unpacked to NCHW (tag "unpack") with bias and `epilogue` (NCHW indices) after it, as
    `conv2d_nchwc` does, so today's NCHW Conv tasks can run it."""
    if x.ndim != 4:
        raise ValueError(f"{name}: expects NCHW input, got {list(x.shape)}")
    c = x.shape[1]
    if ic_bn < 1 or c % ic_bn:
        raise ValueError(f"{name}: input channel block {ic_bn} does not divide {c} channels")
    blocked = conv2d_winograd_nchwc(pack_data(x, ic_bn), whole_blocks(w, oc_bn), None, padding, dilation, m=m,
                                    oc_bn=oc_bn, tile_multiple=tile_multiple, name=name)
    return unpack_nchw(blocked, w.shape[0], bias, epilogue, name)


__all__ = ["winograd_matrices", "conv2d_winograd", "conv2d_winograd_nchwc", "weight_transform", "input_transform",
           "batched_gemm", "output_transform", "check_eligible", "tile_counts", "gemm_tile", "WEIGHT_TAG", "INPUT_TAG", "GEMM_TAG",
           "OUTPUT_TAG", "INPUT_ROWS_TAG", "OUTPUT_ROWS_TAG", "WEIGHT_ROWS_TAG", "POINTS", "TILE_SIZES"]
