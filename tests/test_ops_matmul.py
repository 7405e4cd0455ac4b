"""MatMul, Dense, Gemm and batched MatMul against numpy, packed and unpacked."""
import dataclasses

import numpy as np
import pytest
from isa import AVX512, ISAS
from ops_helpers import rand, run
from task_helpers import matmul_task

from autosched import ops, te
from autosched.lower import lower
from autosched.ops.epilogue import relu
from autosched.ops.matmul import Packing, default_packing, matmul, wide_k_block

PACKINGS = {"unpacked": lambda m, n, caps: None, "default": default_packing,
            "odd": lambda m, n, caps: Packing(mr=5, nr=7)}


def _t(a, trans):
    return np.swapaxes(a, -1, -2) if trans else a


@pytest.mark.parametrize("packing", sorted(PACKINGS))
@pytest.mark.parametrize("m, k, n", [(127, 61, 37), (1, 1, 1), (3, 7, 1), (16, 32, 64)])
def test_matmul_2d(packing, m, k, n, cpu_target):
    a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
    da, db = rand(m, k), rand(k, n)
    got = run(matmul(a, b, packing=PACKINGS[packing](m, n, cpu_target.capabilities)), [a, b], [da, db], ops.schedule_matmul, cpu_target)
    np.testing.assert_allclose(got, da.astype(np.float64) @ db, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("trans_a, trans_b", [(False, True), (True, False), (True, True)])
def test_matmul_transposes(packed, trans_a, trans_b, cpu_target):
    m, k, n = 13, 61, 37
    sa, sb = ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))
    a, b = te.placeholder(sa, name="a"), te.placeholder(sb, name="b")
    da, db = rand(*sa), rand(*sb)
    y = matmul(a, b, trans_a, trans_b, packing=default_packing(m, n, cpu_target.capabilities) if packed else None)
    got = run(y, [a, b], [da, db], ops.schedule_matmul, cpu_target)
    np.testing.assert_allclose(got, _t(da, trans_a).astype(np.float64) @ _t(db, trans_b), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("sa, sb", [
    ((2, 5, 7), (2, 7, 3)),
    ((5, 7), (3, 7, 4)),
    ((1, 5, 7), (4, 7, 33)),
    ((2, 1, 9, 7), (3, 7, 6)),
])
def test_batch_matmul_broadcasts_batch_dims(packed, sa, sb, cpu_target):
    a, b = te.placeholder(sa, name="a"), te.placeholder(sb, name="b")
    da, db = rand(*sa), rand(*sb)
    y = matmul(a, b, packing=default_packing(sa[-2], sb[-1], cpu_target.capabilities) if packed else None)
    got = run(y, [a, b], [da, db], ops.schedule_matmul, cpu_target)
    want = np.matmul(da.astype(np.float64), db)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("packed", [False, True])
def test_dense_with_bias_and_relu(packed, cpu_target):
    x, w, b = te.placeholder((4, 61), name="x"), te.placeholder((37, 61), name="w"), te.placeholder((37,), name="b")
    dx, dw, db = rand(4, 61), rand(37, 61), rand(37)
    y = ops.dense(x, w, b, epilogue=[relu], packing=default_packing(4, 37, cpu_target.capabilities) if packed else None)
    got = run(y, [x, w, b], [dx, dw, db], ops.schedule_matmul, cpu_target)
    np.testing.assert_allclose(got, np.maximum(dx.astype(np.float64) @ dw.T + db, 0), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("c_shape, alpha, beta, trans_a, trans_b", [
    ((37,), 0.5, 2.0, False, False),
    ((127, 37), 1.0, 1.0, True, False),
    ((1, 37), 2.0, 0.0, False, True),
    ((127, 1), 1.0, -1.0, True, True),
    (None, 0.25, 1.0, False, False),
])
def test_gemm_alpha_beta(packed, c_shape, alpha, beta, trans_a, trans_b, cpu_target):
    m, k, n = 127, 61, 37
    sa, sb = ((k, m) if trans_a else (m, k)), ((n, k) if trans_b else (k, n))
    a, b = te.placeholder(sa, name="a"), te.placeholder(sb, name="b")
    da, db = rand(*sa), rand(*sb)
    inputs, arrays = [a, b], [da, db]
    want = alpha * (_t(da, trans_a).astype(np.float64) @ _t(db, trans_b))
    c = None
    if c_shape is not None:
        c = te.placeholder(c_shape, name="c")
        dc = rand(*c_shape)
        inputs.append(c)
        arrays.append(dc)
        want = want + beta * dc
    packing = default_packing(m, n, cpu_target.capabilities) if packed else None
    y = ops.gemm(a, b, c, alpha, beta, trans_a, trans_b, packing=packing)
    if c is not None and beta == 0.0:
        inputs.pop(), arrays.pop()  # ONNX semantics: C is not read at all
    got = run(y, inputs, arrays, ops.schedule_matmul, cpu_target)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_matmul_rejects_mismatched_inner_dims():
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(te.placeholder((3, 4)), te.placeholder((5, 6)))
    with pytest.raises(ValueError, match="do not broadcast"):
        matmul(te.placeholder((2, 3, 4)), te.placeholder((3, 4, 5)))


def test_batched_accumulator_covers_one_tile():
    """Bound inference sees through the fused batch/column/row tile loop: the local
    accumulator is one mr × nr tile, not every column of the matrix."""
    a, b = te.placeholder((4, 50, 64), name="a"), te.placeholder((4, 64, 48), name="b")
    y = matmul(a, b, packing=default_packing(50, 48, AVX512.capabilities))
    assert "allocate matmul_local: float32[1, 6, 32] in local" in str(lower(ops.schedule_matmul(y, 16), [a, b, y]))


@pytest.mark.parametrize("isa, m, tile", [("avx2", 1020, (6, 16, False)), ("avx512", 1024, (8, 32, False)),
                                          ("avx2", 1024, (6, 16, True)),
                                          ("avx2", 127, (6, 16, True)), ("avx512", 127, (6, 32, True))])
def test_default_register_tile_fits_the_targets_registers(isa, m, tile):
    """12 accumulators of AVX2's 16 ymm registers, 16 of AVX-512's 32 zmm where rows divide m
    (A read in place); the 6-row packed BLIS tile where none does."""
    target, _, lanes = ISAS[isa]
    packing = default_packing(m, 1024, target.capabilities)
    assert (packing.mr, packing.nr, packing.pack_a) == tile
    assert packing.mr * packing.nr // lanes + packing.nr // lanes + 1 <= target.capabilities.vector_registers


@pytest.mark.parametrize("m, trans_a, want", [(128, False, (8, False)), (96, False, (8, False)), (30, False, (6, False)),
                                              (127, False, (6, True)), (128, True, (6, True)),
                                              (1, False, (1, False)), (5, False, (5, False)), (5, True, (5, True))])
def test_default_packing_reads_a_in_place_where_rows_divide(m, trans_a, want):
    p = default_packing(m, 256, AVX512.capabilities, trans_a=trans_a)
    assert (p.mr, p.pack_a) == want


@pytest.mark.parametrize("n, want", [(768, (6, 16, False)), (64, (6, 16, False)), (24, (6, 16, False)),
                                     (10, (8, 8, False))])
def test_avx2_in_place_tile_is_two_vectors_of_six_rows(n, want):
    """AVX2's in-place tile is 6 rows × 2 vectors (one vector: 8 rows), as wide as the packed
    tile, so its columns never pad more than packing's."""
    p = default_packing(144, n, ISAS["avx2"][0].capabilities)
    assert (p.mr, p.nr, p.pack_a) == want


def test_unpacked_a_needs_rows_that_divide_m():
    a, b = te.placeholder((10, 8), name="a"), te.placeholder((8, 16), name="b")
    with pytest.raises(ValueError, match="divide m"):
        matmul(a, b, packing=Packing(mr=4, nr=16, pack_a=False))


def _unpacked_configs(n: int, seed: int) -> list[tuple]:
    """(batch of A, batch of B, mr, m, k, n, nr, trans_b) with mr dividing m."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        mr = int(rng.choice([1, 2, 4, 6, 8]))
        batch = [(), (3,), (2, 1)][int(rng.integers(0, 3))]
        batch_b = batch if rng.random() < 0.5 else ()
        out.append((batch, batch_b, mr, mr * int(rng.integers(1, 5)), int(rng.integers(1, 70)),
                    int(rng.integers(1, 70)), int(rng.choice([4, 8, 16, 32])), bool(rng.random() < 0.3)))
    return out


@pytest.mark.parametrize("ba, bb, mr, m, k, n, nr, trans_b", _unpacked_configs(20, 3))
def test_matmul_with_a_unpacked_random(ba, bb, mr, m, k, n, nr, trans_b, cpu_target):
    sa, sb = ba + (m, k), bb + ((n, k) if trans_b else (k, n))
    a, b = te.placeholder(sa, name="a"), te.placeholder(sb, name="b")
    da, db = rand(*sa), rand(*sb)
    y = matmul(a, b, trans_b=trans_b, packing=Packing(mr=mr, nr=nr, pack_a=False))
    got = run(y, [a, b], [da, db], ops.schedule_matmul, cpu_target)
    np.testing.assert_allclose(got, np.matmul(da.astype(np.float64), _t(db, trans_b)), rtol=1e-3, atol=1e-4)


#: BERT's FFN down (A in place), ViT-S's MLP up (197 rows: A packed), 196 rows (no tile of two
#: vectors divides them, and 32 registers take no default tile of three: packed as 197 are), the
#: MLP's fc1 (k = 784: blocks of 196, the largest of whole 4-deep steps between 128 and 256),
#: attention's scores, a classifier's one row (read in place: packing it is a parallel region for
#: one row)
WIDE_CASES = [((128, 768, 3072), (8, 48, False), 256), ((197, 1536, 384), (8, 48, True), 128),
              ((196, 384, 768), (8, 48, True), 256), ((64, 1024, 784), (8, 48, False), 196),
              ((128, 128, 64), (8, 32, False), None), ((1, 1000, 512), (1, 32, False), None)]


@pytest.mark.parametrize("mnk, tile, block", WIDE_CASES, ids=["ffn_down", "vit_mlp_up", "rows_196", "k_784", "scores", "one_row"])
def test_intel_avx512_cores_take_the_wide_tile_on_wide_deep_products(mnk, tile, block):
    """8 × 48 tiles of blocked reductions on Intel's AVX-512 cores (measured there: 1.03-1.42×); the
    same products on AMD's, or on a core of no known vendor, keep the default tiles."""
    m, n, k = mnk
    intel = AVX512.capabilities
    assert intel.vendor == "intel"
    p = default_packing(m, n, intel, trans_a=False, k=k)
    assert (p.mr, p.nr, p.pack_a) == tile and wide_k_block(m, n, k, intel) == block
    for vendor in ("amd", None):
        other = dataclasses.replace(intel, vendor=vendor)
        assert default_packing(m, n, other, k=k) == default_packing(m, n, other) and wide_k_block(m, n, k, other) is None
    avx2 = ISAS["avx2"][0].capabilities  # 16 registers: no room for 8 × 3 vectors
    assert avx2.vendor == "intel" and wide_k_block(m, n, k, avx2) is None


def test_no_default_tile_of_three_vectors():
    """196 rows, which 4 divides and neither 8 nor 6: gcc reads a 4 x 48 (AVX-512) or 4 x 24
    (AVX2) tile's B vectors from memory at every FMA (112 GFLOP/s against 221 in 8 x 32 on a Zen
    4; BERT's 768 x 768 projection 1.8x slower than 6 x 16 on a Zen 3), so the default packs A,
    and the template's fallback reads it in place with the last two-vector row tile shifted; on
    Intel's AVX-512 cores, where the product is wide and deep, with the last row tile of the wide
    8 x 48 one shifted (Mixer-B's 196 x 512 . 512 x 2048: 1.570 against 1.813 ms in 8 x 32 over
    the whole reduction, median of 4 alternated timings, Xeon, 2 threads)."""
    from search_spaces.llvm.matmul import TEMPLATE
    amd = dataclasses.replace(AVX512.capabilities, vendor="amd")
    assert default_packing(196, 2048, amd) == Packing(mr=6, nr=32, pack_a=True)
    assert default_packing(192, 2048, amd) == Packing(mr=8, nr=32, pack_a=False)
    avx2 = ISAS["avx2"][0].capabilities
    assert default_packing(196, 2048, avx2) == Packing(mr=6, nr=16, pack_a=True)
    assert default_packing(192, 2048, avx2) == Packing(mr=6, nr=16, pack_a=False)
    task = matmul_task((196, 512), (512, 2048))
    amd_target = dataclasses.replace(AVX512, capabilities=amd)
    for target, (mr, nr, tile_k) in ((ISAS["avx2"][0], (6, 16, (1, 512, 1))), (amd_target, (8, 32, (1, 512, 1))),
                                     (AVX512, (8, 48, (4, 32, 4)))):
        config = TEMPLATE.fallback(task, target)
        assert (config["mr"], config["nr"], config["pack_a"], tuple(config["tile_k"])) == (mr, nr, False, tile_k)
