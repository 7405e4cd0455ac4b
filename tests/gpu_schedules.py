"""Hand-written GPU schedules for the CUDA code generation and emulation tests."""
from autosched import te
from autosched.schedule import create_schedule


def tiled_matmul(m: int, n: int, k: int, block=(32, 32, 8), thread=(4, 4), vec: int = 4, double_buffer: bool = False):
    """C = A·B with block tiles, per-thread register tiles and k tiles staged through shared memory."""
    bm, bn, bk = block
    tm, tn = thread
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    s = create_schedule(c)
    cl = s.cache_write(c, "local")
    shared = [s.cache_read(t, "shared", [s[cl]]) for t in (a, b)]
    i, j = s[c].op.axes
    bi, ii = s[c].split(i, bm)
    bj, jj = s[c].split(j, bn)
    ty, ri = s[c].split(ii, tm)
    tx, rj = s[c].split(jj, tn)
    s[c].reorder(bi, bj, ty, tx, ri, rj)
    for axis, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[c].bind(axis, tag)
    s[c].unroll(ri)
    s[c].vectorize(rj)
    s.compute_at(s[cl], s[c], tx)
    ci, cj = s[cl].op.axes
    ko, ki = s[cl].split(s[cl].op.reduce_axes[0], bk)
    s[cl].reorder(ko, ki, ci, cj)
    for axis in (ki, ci, cj):
        s[cl].unroll(axis)
    # the copy stages use exactly the block's threads (tiles larger than the matrix shrink to it)
    threads_x = -(-min(bn, n) // min(tn, bn, n))
    threads = -(-min(bm, m) // min(tm, bm, m)) * threads_x
    for x in shared:
        s.compute_at(s[x], s[cl], ko)
        if double_buffer:
            s[x].double_buffered()
        f, v = s[x].split(s[x].fuse(*s[x].op.axes), vec)
        f, t = s[x].split(f, threads)
        t_y, t_x = s[x].split(t, threads_x)
        s[x].bind(t_y, "threadIdx.y")
        s[x].bind(t_x, "threadIdx.x")
        s[x].vectorize(v)
    return s, [a, b, c]
