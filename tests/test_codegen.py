"""C code generation: real SIMD, real unrolling, OpenMP, readable errors, the compile cache."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from isa import HOST, ISAS, runs_here

from autosched import te
from autosched.codegen import CodegenError, CompileError, gcc
from autosched.codegen.gcc import compile_c, optimization_report, target_flags
from autosched.compile.kernel import build_kernel, source
from autosched.ops.matmul import default_packing, matmul, schedule_matmul
from autosched.schedule import create_schedule


def _packed_matmul(m=48, n=64, k=32, target=HOST):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    c = matmul(a, b, packing=default_packing(m, n, target.capabilities))
    return a, b, c, schedule_matmul(c, target.capabilities.lanes(4))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_vectorized_loops_become_simd_instructions(tmp_path, isa):
    """Compiled for each ISA on any x86-64 host (objdump reads what it cannot run): the 6-row,
    two-vector micro-kernel issues its 12 FMAs per k step in the target's register class only."""
    target, register, lanes = ISAS[isa]
    a, b, c, s = _packed_matmul(target=target)
    kern = build_kernel(s, [a, b, c], "mm", target=target, cache_dir=tmp_path)
    assert f"vector_size({lanes * 4})" in kern.source  # GCC vector extension types in the source
    # every vector is one register wide: a copy-out two registers wide made gcc -O3 keep the AVX2
    # accumulators on the stack (half the speed)
    assert f"f32x{2 * lanes}" not in kern.source
    asm = subprocess.run(["objdump", "-d", str(kern.path)], capture_output=True, text=True, check=True).stdout
    fma = re.findall(rf"vfmadd\w*ps\s+%{register}", asm)
    assert len(fma) >= 12, f"the 6x{2 * lanes} micro-kernel should issue at least 12 {register} FMAs per k step"
    if register == "ymm":
        assert "%zmm" not in asm, "AVX2 code must not touch AVX-512 registers"


def test_unrolled_loops_are_unrolled_by_gcc():
    a, b, c, s = _packed_matmul()
    code = source(s, [a, b, c], "mm")
    pragma_lines = {i + 2 for i, line in enumerate(code.splitlines()) if "#pragma GCC unroll" in line}
    report = optimization_report(code, target_flags(HOST))
    unrolled = {int(m.group(1)) for m in re.finditer(r"kernel\.c:(\d+):\d+: optimized: loop with \d+ iterations "
                                                      r"completely unrolled", report)}
    assert pragma_lines and pragma_lines <= unrolled, report


def test_parallel_loop_is_openmp_and_thread_count_applies():
    a, b, c, s = _packed_matmul()
    kern = build_kernel(s, [a, b, c], "mm")
    assert "#pragma omp parallel for" in kern.source
    av = np.random.default_rng(1).standard_normal((48, 32)).astype(np.float32)
    bv = np.random.default_rng(2).standard_normal((32, 64)).astype(np.float32)
    for threads in (1, 2):
        kern.set_num_threads(threads)
        cv = np.zeros((48, 64), np.float32)
        kern(av, bv, cv)
        np.testing.assert_allclose(cv, av @ bv, rtol=1e-4, atol=1e-4)


def test_gpu_concepts_rejected_by_c_backend():
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: x[i] + 1.0, name="y")
    s = create_schedule(y)
    bx, tx = s[y].split(s[y].op.axes[0], 32)
    s[y].bind(tx, "threadIdx.x")
    with pytest.raises(CodegenError, match="threadIdx.x.*C back end"):
        source(s, [x, y])
    s2 = create_schedule(y)
    xs = s2.cache_read(x, "shared", [s2[y]])
    s2.compute_at(s2[xs], s2[y], s2[y].op.axes[0])
    with pytest.raises(CodegenError, match="shared memory"):
        source(s2, [x, y])


def test_compile_error_shows_offending_source_line(tmp_path):
    bad = "int f(void) {\n  int x = 1;\n  return x +* ;\n}\n"
    with pytest.raises(CompileError) as err:
        compile_c(bad, target_flags(HOST), cache_dir=tmp_path)
    assert "line 3: return x +* ;" in str(err.value)


def test_compile_cache_reuses_the_library(tmp_path):
    code = "int f(void) { return 42; }\n"
    first = compile_c(code, target_flags(HOST), cache_dir=tmp_path)
    stamp = first.stat().st_mtime_ns
    second = compile_c(code, target_flags(HOST), cache_dir=tmp_path)
    assert first == second and second.stat().st_mtime_ns == stamp
    assert compile_c(code, ("-O2", "-shared", "-fPIC"), cache_dir=tmp_path) != first


def test_compile_cache_is_keyed_by_the_isa(tmp_path, monkeypatch):
    """A cache directory filled under one -mcpu is not reused under another, and one shared by
    an AVX-512 and an AVX2 host never hands either the other's -march=native object."""
    code = "int f(void) { return 42; }\n"
    avx2 = compile_c(code, target_flags(ISAS["avx2"][0]), cache_dir=tmp_path)
    avx512 = compile_c(code, target_flags(ISAS["avx512"][0]), cache_dir=tmp_path)
    assert avx2 != avx512 and len(list(tmp_path.glob("*.so"))) == 2
    native = target_flags(HOST)
    here = gcc.cache_key(code, native)
    # another host: the same -march=native enables another ISA there
    monkeypatch.setattr(gcc, "gcc_isa_flags", lambda flags, cc="gcc": frozenset({"avx", "avx2", "fma"}))
    assert gcc.cache_key(code, native) != here

def test_kernel_checks_arguments():
    a, b, c, s = _packed_matmul(8, 8, 8)
    kern = build_kernel(s, [a, b, c], "mm")
    good = [np.zeros((8, 8), np.float32) for _ in range(3)]
    with pytest.raises(TypeError, match="argument B must be float32\\[8, 8\\], got float64"):
        kern(good[0], np.zeros((8, 8)), good[2])
    with pytest.raises(TypeError, match="takes 3 arrays"):
        kern(good[0], good[1])
    with pytest.raises(TypeError, match="C-contiguous"):
        kern(good[0], np.zeros((8, 8), np.float32).T, good[2])


def test_names_that_are_c_keywords_and_duplicates_compile():
    x = te.placeholder((4,), name="int")
    y = te.compute((4,), lambda i: x[i] * 2.0, name="float")
    s = create_schedule(y)
    kern = build_kernel(s, [x, y], "for")
    out = np.zeros(4, np.float32)
    kern(np.arange(4, dtype=np.float32), out)
    np.testing.assert_array_equal(out, [0, 2, 4, 6])


def test_math_and_select_vectorized_match_numpy():
    x = te.placeholder((37,), name="x")
    y = te.compute((37,), lambda i: te.select(x[i] > 0.0, te.tanh(x[i]) + te.erf(x[i]), te.exp(x[i]) * te.sqrt(te.abs(x[i]))),
                   name="y")
    s = create_schedule(y)
    xo, xi = s[y].split(s[y].op.axes[0], 16)
    s[y].vectorize(xi)
    kern = build_kernel(s, [x, y], "mathy")
    xv = np.random.default_rng(3).standard_normal(37).astype(np.float32)
    out = np.zeros(37, np.float32)
    kern(xv, out)
    from math import erf
    ref = np.where(xv > 0, np.tanh(xv) + np.vectorize(erf)(xv), np.exp(xv) * np.sqrt(np.abs(xv)))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_timer_in_c_reports_per_call_seconds():
    a, b, c, s = _packed_matmul(48, 64, 32)
    kern = build_kernel(s, [a, b, c], "mm")
    args = kern.bind([np.ones((48, 32), np.float32), np.ones((32, 64), np.float32), np.zeros((48, 64), np.float32)])
    costs = kern.time(args, repeat=4, min_repeat_ms=2.0, flush_bytes=1 << 20)
    assert len(costs) == 4 and all(0 < x < 1.0 for x in costs)
    assert np.all(args.arrays[2] == 32.0)
    assert len(kern.time(args, repeat=5, min_repeat_ms=1.0, stop_above=1e-12)) == 1  # gives up after one repeat
    before = [a.copy() for a in args.arrays]
    assert len(kern.time(args, repeat=3, min_repeat_ms=1.0, flush_bytes=1 << 20, warm=(0,))) == 3  # A read back
    assert all(np.array_equal(a, b) for a, b in zip(args.arrays, before))  # reading back writes nothing


def test_per_lane_select_vectorizes_only_when_loads_are_safe():
    x = te.placeholder((64,), name="x")
    leaky = te.compute((64,), lambda i: te.select(x[i] >= 0.0, x[i], x[i] * 0.1), name="leaky")
    s = create_schedule(leaky)
    _, inner = s[leaky].split(s[leaky].op.axes[0], 16)
    s[leaky].vectorize(inner)
    code = source(s, [x, leaky])
    assert "sel_ge_f32_f32x16" in code and "#pragma omp simd" not in code
    shifted = te.compute((64,), lambda i: te.select(i >= 1, x[i - 1], 0.0), name="shifted")
    s2 = create_schedule(shifted)
    _, inner2 = s2[shifted].split(s2[shifted].op.axes[0], 16)
    s2[shifted].vectorize(inner2)
    code2 = source(s2, [x, shifted])
    assert "#pragma omp simd" in code2  # x[i - 1] at i = 0 must not be loaded: scalar fallback
    kern = build_kernel(s2, [x, shifted], "shifted")
    out = np.zeros(64, np.float32)
    kern(np.arange(64, dtype=np.float32), out)
    np.testing.assert_array_equal(out, np.concatenate([[0], np.arange(63)]))


def test_edge_tiles_keep_vector_code_through_loop_versioning():
    x = te.placeholder((37,), name="x")
    y = te.compute((37,), lambda i: x[i] * 3.0, name="y")
    s = create_schedule(y)
    _, inner = s[y].split(s[y].op.axes[0], 16)
    s[y].vectorize(inner)
    kern = build_kernel(s, [x, y], "versioned")
    assert "f32x16" in kern.source and "#pragma omp simd" in kern.source  # vector body, scalar edge
    out = np.zeros(37, np.float32)
    kern(np.arange(37, dtype=np.float32), out)
    np.testing.assert_array_equal(out, np.arange(37) * 3.0)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_guarded_edge_tile_loop_stops_at_its_bound(tmp_path, isa):
    """The scalar edge of a split that does not divide (37 = 2·16 + 5) runs 5 iterations, its
    bound in the loop, not 16 iterations that each test the guard. Built for each ISA, run
    where the host can."""
    target, _, lanes = ISAS[isa]
    x = te.placeholder((37, 37), name="x")
    y = te.compute((37, 37), lambda i, j: x[j, i] + 1.0, name="y")
    s = create_schedule(y)
    io, ii = s[y].split(s[y].op.axes[0], lanes)
    jo, ji = s[y].split(s[y].op.axes[1], lanes)
    s[y].reorder(io, jo, ii, ji)
    s[y].vectorize(ji)
    kern = build_kernel(s, [x, y], "edge_bound", target=target, cache_dir=tmp_path)
    assert re.search(rf"for \(int32_t \w+ = 0; \w+ < as_min_i32\({lanes}, ", kern.source), kern.source
    assert "+ j_i) < 37" not in kern.source  # its guard is the bound now (the row's stays)
    if not runs_here(target):
        pytest.skip(f"the host cannot run {isa} code (generated above)")
    data = np.arange(37 * 37, dtype=np.float32).reshape(37, 37)
    out = np.zeros((37, 37), np.float32)
    kern(data, out)
    np.testing.assert_array_equal(out, data.T + 1.0)


def test_padding_select_vectorizes_inside_and_stays_safe_at_the_border():
    x = te.placeholder((4, 40), name="x")
    xp = te.compute((4, 48), lambda i, j: te.select((j >= 4) & (j < 44), x[i, j - 4], 0.0), name="xp")
    s = create_schedule(xp)
    _, inner = s[xp].split(s[xp].op.axes[1], 16)
    s[xp].vectorize(inner)
    kern = build_kernel(s, [x, xp], "padded")
    assert "f32x16" in kern.source
    xv = np.random.default_rng(0).standard_normal((4, 40)).astype(np.float32)
    out = np.zeros((4, 48), np.float32)
    kern(xv, out)
    np.testing.assert_array_equal(out, np.pad(xv, ((0, 0), (4, 4))))


_COUNT_ALLOCS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
long autosched_test_allocs = 0;
void* aligned_alloc(size_t alignment, size_t size) {
  static void* (*next)(size_t, size_t) = NULL;
  if (next == NULL) next = (void* (*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  if (size >= 65536) __atomic_add_fetch(&autosched_test_allocs, 1, __ATOMIC_RELAXED);
  return next(alignment, size);
}
"""

_CALLS = """
import ctypes
import numpy as np
from autosched import te
from autosched.compile.kernel import build_kernel
from autosched.schedule import create_schedule
n = 200_000  # 800 KB: on the heap
x = te.placeholder((n,), name="x")
t = te.compute((n,), lambda i: x[i] * 2.0, name="T")
y = te.compute((n,), lambda i: t[n - 1 - i] + 1.0, name="Y")
k = build_kernel(create_schedule(y), [x, y], "k")
data = np.arange(n, dtype=np.float32)
out = np.zeros(n, np.float32)
allocs = ctypes.c_long.in_dll(ctypes.CDLL(None), "autosched_test_allocs")
before = allocs.value
for _ in range(20):
    k(data, out)
print(allocs.value - before)
np.testing.assert_allclose(out, data[::-1] * 2.0 + 1.0)
"""


def test_a_heap_temporary_is_allocated_once_not_on_every_call(tmp_path):
    """A temporary allocated and freed on every call is, where malloc hands it back to the
    system at the free (glibc trims its heap above a threshold), page-faulted in again at every
    call: in a model, BERT's attention products ran 1.5x slower for it. The kernel keeps its
    workspace instead (c.py, `_workspace_decls`): 20 calls allocate it once, not 20 times,
    counted by an `aligned_alloc` put in front of the C library's."""
    shim = tmp_path / "count_allocs.so"
    src = tmp_path / "count_allocs.c"
    src.write_text(_COUNT_ALLOCS)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(shim), "-ldl"], check=True)
    env = dict(os.environ, LD_PRELOAD=str(shim))
    run = subprocess.run([sys.executable, "-c", _CALLS], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) == 1


def test_a_heap_temporary_inside_a_parallel_loop_is_each_threads_own():
    """A workspace shared by the kernel's calls must not be shared by its threads: a heap
    temporary inside a parallel loop is allocated and freed by each iteration."""
    rows, cols = 4, 70_000
    x = te.placeholder((rows, cols), name="x")
    t = te.compute((rows, cols), lambda i, j: x[i, j] * 2.0, name="T")
    y = te.compute((rows, cols), lambda i, j: t[i, cols - 1 - j] + 1.0, name="Y")
    s = create_schedule(y)
    s.compute_at(s[t], s[y], s[y].op.axes[0])
    s[y].parallel(s[y].op.axes[0])
    code = source(s, [x, y], "k")
    assert "autosched_workspace" not in code and "free(T)" in code
    data = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((rows, cols), np.float32)
    build_kernel(s, [x, y], "k")(data, out)
    np.testing.assert_allclose(out, data[:, ::-1] * 2.0 + 1.0, rtol=1e-6)


def test_heap_temporaries_of_a_module_share_one_workspace():
    """Nested temporaries lie one above the other (A is still read while B is written), and the
    module's workspace is the largest such stack: a model holds the most one kernel needs."""
    n = 100_000  # 400 KB each
    x = te.placeholder((2, n), name="x")
    a = te.compute((2, n), lambda i, j: x[i, j] * 2.0, name="A")
    b = te.compute((2, n), lambda i, j: a[i, n - 1 - j] + 1.0, name="B")
    c = te.compute((2, n), lambda i, j: b[i, n - 1 - j] * a[i, j], name="C")
    s = create_schedule(c)
    s.compute_at(s[b], s[c], s[c].op.axes[0])
    s.compute_at(s[a], s[c], s[c].op.axes[0])
    code = source(s, [x, c], "k")
    sizes = [int(m) for m in re.findall(r"aligned_alloc\(64, (\d+)\)", code)]
    assert sizes and max(sizes) == 800_000  # A inside B's region: 2 x 400 KB at once
    assert re.search(r"A_ws \+ 0\)", code) and re.search(r"B_ws \+ 400000\)", code)
    data = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
    out = np.zeros((2, n), np.float32)
    build_kernel(s, [x, c], "k")(data, out)
    np.testing.assert_allclose(out, (data * 2.0 + 1.0) * data * 2.0, rtol=1e-6)


@pytest.mark.parametrize("rotate", [False, True])
def test_lanes_reading_a_pattern_within_one_block_are_a_load_and_a_shuffle(rotate):
    """y[b, j, l] = x[b, l // 4 * 4 + j]: every lane stays in block b, so the loop loads the block
    and shuffles it by the lane pattern plus j. Rotated by 4j within the block instead, the
    lanes' offsets from lane 0 depend on j, and the loop gathers lane by lane as before. Both
    compute the same."""
    x = te.placeholder((6, 16), name="x")
    if rotate:
        y = te.compute((6, 4, 16), lambda b, j, c: x[b, (c // 4 * 4 + j * 4) % 16] * 2.0, name="y")
    else:
        y = te.compute((6, 4, 16), lambda b, j, c: x[b, c // 4 * 4 + j] * 2.0, name="y")
    s = create_schedule(y)
    s[y].vectorize(s[y].op.axes[2])
    kern = build_kernel(s, [x, y], f"lanes{int(rotate)}")
    assert ("__builtin_shuffle(*(f32x16*)&x[" in kern.source) != rotate
    xv = np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32)
    out = np.zeros((6, 4, 16), np.float32)
    kern(xv, out)
    lanes, j = np.arange(16), np.arange(4)[:, None]
    index = (lanes // 4 * 4 + 4 * j) % 16 if rotate else lanes // 4 * 4 + j
    np.testing.assert_array_equal(out, 2 * xv[:, index])
