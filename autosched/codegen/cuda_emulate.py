"""The CUDA program run on the CPU: the lowered GPU kernel as C with CUDA's execution model.

Blocks run one after another in a scrambled order (a kernel that relies on block order is
wrong on a GPU). Each thread of a block runs the kernel body on its own stack (a ucontext
coroutine), so its locals are its registers; at a barrier it yields, and the block moves on
only when every thread waits at the same barrier: threads run in lockstep between barriers,
in alternating order, so a read of shared memory another thread writes in the same phase is
likely to see the wrong value here as on a GPU. Shared memory is one buffer per block, filled
with NaN bytes when the block starts. Every access is bounds-checked.

The kernel keeps the C back end's signature (returns 0, or 1 with a message in
`autosched_last_error()`), so the C runtime, the measurement worker and the model executor
call it unchanged. Errors reported: an out-of-bounds access (naming buffer, index, block and
thread), a barrier not every thread of a block reaches, threads waiting at different barriers.
The emulator's state is static: a module runs one kernel at a time (as the executor calls them).

Asynchronous copies (cp.async) are queued per thread and land in shared memory only when a
wait retires their group, so a read before the wait sees the old contents (NaN) here as it may on
a GPU. A warp-level mma is a lockstep point: every lane publishes its fragments (inputs rounded
as the PTX conversions round them: TF32 as `cvt.rna` does, to nearest, ties away from zero, 10
mantissa bits; FP16 and BF16 to nearest even, 10 and 7 bits, FP16 within a half's range), and after the
block has synchronized each lane computes its accumulator elements from the fragments of the
lanes that hold them in the PTX ISA's m16n8k8 layout, then synchronizes again before the
fragments are reused. Synchronizing the whole block, not only the warp, is stricter than a GPU:
warps that reach different mma instructions are reported, which no template produces.
"""
from __future__ import annotations

from autosched.codegen import threads
from autosched.codegen.cstyle import param_decls
from autosched.codegen.gpu import GpuRenderer, copy_source
from autosched.lower.ir import AsyncCopy, Barrier, PrimFunc, Store, WarpMma, walk_stmts
from autosched.schedule import MMA_PRECISIONS
from autosched.te.expr import Expr, Load

#: the emulator's runtime, shared by every kernel of a module
RUNTIME = r"""
typedef struct { int32_t x, y, z; } emu_dim3;
enum { EMU_RUN, EMU_WAIT, EMU_DONE, EMU_SHFL };
typedef struct { float* dst; const float* src; int64_t group; } emu_copy;  /* src NULL: zero-fill */
/* a thread; waiting at a warp shuffle (EMU_SHFL) of call site `site`, it offers xval to the `width`
   lanes of its group and gets back xresult, lane ^ xmask's offer */
typedef struct {
  ucontext_t ctx; emu_dim3 tid; int state, site, width, xmask; double xval, xresult;
  emu_copy* copies; int64_t n_copies, copy_capacity, committed;  /* cp.async queue */
} emu_thread;
typedef struct { float a[4], b[2], c[4]; } emu_fragments;
static emu_fragments* emu_frags;
#define EMU_STACK_BYTES (128 * 1024)
static emu_dim3 emu_bid, emu_tid, emu_bdim;
static emu_thread* emu_threads;
static char* emu_stacks;
static int64_t emu_capacity;
static unsigned char* emu_smem;
static int64_t emu_smem_capacity;
static ucontext_t emu_main;
static emu_thread* emu_cur;
static void (*emu_body)(void);
static int emu_failed;
static char emu_error[600];
static const char* emu_kernel;

const char* autosched_last_error(void) { return emu_error; }
void autosched_set_num_threads(int32_t n) { (void)n; }

static void emu_fail(const char* what, int64_t a, int64_t b) {
  if (emu_failed) return;
  emu_failed = 1;
  int n = snprintf(emu_error, sizeof emu_error, "%s: block (%d, %d, %d) thread (%d, %d, %d): ", emu_kernel,
                   emu_bid.x, emu_bid.y, emu_bid.z, emu_tid.x, emu_tid.y, emu_tid.z);
  snprintf(emu_error + n, sizeof emu_error - n, what, (long long)a, (long long)b);
}

static inline int64_t emu_idx(int64_t i, int64_t size, const char* buffer) {
  if (__builtin_expect(i < 0 || i >= size, 0)) {
    char what[160];
    snprintf(what, sizeof what, "%s[%%lld] is out of bounds (size %%lld)", buffer);
    emu_fail(what, i, size);
    return 0;
  }
  return i;
}

static void emu_barrier(int site) {
  emu_cur->state = EMU_WAIT;
  emu_cur->site = site;
  swapcontext(&emu_cur->ctx, &emu_main);
}

/* __shfl_xor_sync at call site `site`: offer v and wait until every lane of this thread's
   `width`-lane group waits at the same shuffle; the release hands each lane its partner's offer. */
static double emu_shfl_xor(double v, int lane_mask, int width, int site) {
  emu_thread* t = emu_cur;
  t->xval = v;
  t->xmask = lane_mask;
  t->width = width;
  t->site = site;
  t->state = EMU_SHFL;
  swapcontext(&t->ctx, &emu_main);
  return t->xresult;
}

/* Complete every shuffle all lanes of whose group wait at it; whether any was. */
static int emu_release_warps(int64_t n) {
  int released = 0;
  for (int64_t k = 0; k < n; ++k) {
    emu_thread* t = &emu_threads[k];
    if (t->state != EMU_SHFL) continue;
    int64_t start = k - k % t->width, end = start + t->width;
    int ready = end <= n;
    for (int64_t j = start; ready && j < end; ++j) {
      emu_thread* u = &emu_threads[j];
      ready = u->state == EMU_SHFL && u->site == t->site && u->width == t->width && u->xmask == t->xmask;
    }
    if (!ready) continue;
    for (int64_t j = start; j < end; ++j) emu_threads[j].xresult = emu_threads[j ^ t->xmask].xval;
    for (int64_t j = start; j < end; ++j) emu_threads[j].state = EMU_RUN;
    released = 1;
  }
  return released;
}

static void emu_cp_async(float* dst, const float* src) {
  emu_thread* t = emu_cur;
  if (t->n_copies == t->copy_capacity) {
    int64_t cap = t->copy_capacity ? 2 * t->copy_capacity : 64;
    emu_copy* grown = (emu_copy*)realloc(t->copies, cap * sizeof(emu_copy));
    if (!grown) { emu_fail("no memory for %lld pending asynchronous copies (%lld queued)", cap, t->n_copies); return; }
    t->copies = grown;
    t->copy_capacity = cap;
  }
  t->copies[t->n_copies++] = (emu_copy){dst, src, t->committed};
}

static void emu_cp_commit(void) { ++emu_cur->committed; }

/* Retire every group but the newest `pending` committed ones: their copies land now. */
__attribute__((noinline)) static void emu_cp_wait(int64_t pending) {
  emu_thread* t = emu_cur;
  int64_t keep = 0;
  for (int64_t k = 0; k < t->n_copies; ++k) {
    emu_copy c = t->copies[k];
    if (c.group < t->committed - pending) *c.dst = c.src ? *c.src : 0.0f;
    else t->copies[keep++] = c;
  }
  t->n_copies = keep;
}

static float emu_tf32(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  /* cvt.rna.tf32.f32 */
  memcpy(&x, &u, 4);
  return x;
}

static float emu_bf16(float x) {  /* cvt.rn.bf16x2.f32: to nearest, ties to even, 7 mantissa bits */
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

static float emu_fp16(float x) {  /* cvt.rn.f16x2.f32: to nearest, ties to even, as a half holds it */
  uint32_t u, mag;
  memcpy(&u, &x, 4);
  mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) return x;  /* infinite, NaN */
  if (mag >= 0x477ff000u) {          /* 65520 and above round to infinity */
    u = (u & 0x80000000u) | 0x7f800000u;
  } else if (mag < 0x38800000u) {    /* below 2^-14: a half's subnormals, steps of 2^-24 */
    float m;
    memcpy(&m, &mag, 4);
    m = rintf(m * 16777216.0f) / 16777216.0f;
    memcpy(&mag, &m, 4);
    u = (u & 0x80000000u) | mag;
  } else {                           /* 10 mantissa bits */
    u = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
  }
  memcpy(&x, &u, 4);
  return x;
}

/* mma.sync.aligned.m16n8k8.row.col.f32.{tf32, f16, bf16} (precision 0, 1, 2), as lane `lane` of
   its warp: rows g, g + 8 and columns 2t, 2t + 1 of C (g = lane / 4, t = lane % 4). With tf32, A's
   (row, k) is element row / 8 + 2 (k / 4) of lane 4 (row % 8) + k % 4, B's (k, col) element k / 4
   of lane 4 col + k % 4; with f16 and bf16 (pairs of k in a register) A's (row, k) is element
   2 (row / 8) + k % 2 of lane 4 (row % 8) + k / 2, B's (k, col) element k % 2 of lane 4 col + k / 2. */
__attribute__((noinline)) static void emu_mma_m16n8k8(int site, int precision, float* d0, float* d1, float* d2,
                                                      float* d3, float a0, float a1, float a2, float a3, float b0,
                                                      float b1) {
  int64_t me = emu_tid.x + (int64_t)emu_bdim.x * (emu_tid.y + (int64_t)emu_bdim.y * emu_tid.z);
  int64_t warp = me / 32 * 32;
  int lane = (int)(me % 32);
  emu_fragments* f = &emu_frags[me];
  float* d[4] = {d0, d1, d2, d3};
  const float a[4] = {a0, a1, a2, a3}, b[2] = {b0, b1};
  float (*round)(float) = precision == 0 ? emu_tf32 : precision == 1 ? emu_fp16 : emu_bf16;
  for (int e = 0; e < 4; ++e) { f->a[e] = round(a[e]); f->c[e] = *d[e]; }
  for (int e = 0; e < 2; ++e) f->b[e] = round(b[e]);
  emu_barrier(site);
  int g = lane / 4, t = lane % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float sum = f->c[e];
    for (int k = 0; k < 8; ++k) {
      float x = precision == 0 ? emu_frags[warp + 4 * (row % 8) + k % 4].a[row / 8 + 2 * (k / 4)]
                               : emu_frags[warp + 4 * (row % 8) + k / 2].a[2 * (row / 8) + k % 2];
      float y = precision == 0 ? emu_frags[warp + 4 * col + k % 4].b[k / 4] : emu_frags[warp + 4 * col + k / 2].b[k % 2];
      sum += x * y;
    }
    out[e] = sum;
  }
  emu_barrier(site + 1);
  for (int e = 0; e < 4; ++e) *d[e] = out[e];
}

static void emu_start(void) {
  emu_body();
  emu_cur->state = EMU_DONE;
}

/* One phase: every runnable thread until it waits at a barrier or finishes. */
static void emu_phase(int64_t n, int reverse) {
  for (int64_t k = 0; k < n && !emu_failed; ++k) {
    emu_thread* t = &emu_threads[reverse ? n - 1 - k : k];
    if (t->state != EMU_RUN) continue;
    emu_cur = t;
    emu_tid = t->tid;
    swapcontext(&emu_main, &t->ctx);
  }
}

static void emu_block(const int32_t* block, int64_t n, int barriers) {
  emu_bdim = (emu_dim3){block[0], block[1], block[2]};
  for (int64_t k = 0; k < n; ++k) {
    emu_thread* t = &emu_threads[k];
    t->tid = (emu_dim3){(int32_t)(k % block[0]), (int32_t)(k / block[0] % block[1]),
                        (int32_t)(k / ((int64_t)block[0] * block[1]))};
    t->n_copies = t->committed = 0;
    if (!barriers) {  /* no barrier: each thread runs to completion, no coroutine needed */
      emu_tid = t->tid;
      emu_cur = t;
      emu_body();
      if (emu_failed) return;
      continue;
    }
    t->state = EMU_RUN;
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = emu_stacks + k * EMU_STACK_BYTES;
    t->ctx.uc_stack.ss_size = EMU_STACK_BYTES;
    t->ctx.uc_link = &emu_main;
    makecontext(&t->ctx, emu_start, 0);
  }
  for (int phase = 0; barriers && !emu_failed; ++phase) {
    emu_phase(n, phase & 1);
    if (!emu_failed && emu_release_warps(n)) continue;
    int64_t waiting = 0, done = 0, site = -1, other = -1;
    for (int64_t k = 0; k < n; ++k) {
      emu_thread* t = &emu_threads[k];
      if (t->state == EMU_DONE) { ++done; continue; }
      if (t->state == EMU_SHFL) {
        emu_tid = t->tid;
        emu_fail("a warp shuffle of a %lld-lane group (site %lld) that not every lane of the group reaches: "
                 "a shuffle under thread-divergent control flow", t->width, t->site);
        return;
      }
      ++waiting;
      if (site < 0) site = t->site; else if (t->site != site) other = t->site;
    }
    if (emu_failed || waiting == 0) return;
    emu_tid = (emu_dim3){0, 0, 0};
    if (done) { emu_fail("barrier %lld reached by only %lld threads, the others finished: a barrier under "
                         "thread-divergent control flow", site, waiting); return; }
    if (other >= 0) { emu_fail("threads wait at different barriers (%lld and %lld): a barrier under "
                               "thread-divergent control flow", site, other); return; }
    for (int64_t k = 0; k < n; ++k) emu_threads[k].state = EMU_RUN;
  }
}

static int32_t emu_launch(const int32_t* grid, const int32_t* block, int64_t shared_bytes, int barriers,
                          void (*body)(void), const char* name) {
  int64_t n = (int64_t)block[0] * block[1] * block[2];
  if (n > emu_capacity) {
    for (int64_t k = 0; k < emu_capacity; ++k) free(emu_threads[k].copies);
    free(emu_threads); free(emu_stacks); free(emu_frags);
    emu_threads = (emu_thread*)calloc(n, sizeof(emu_thread));
    emu_stacks = (char*)malloc(n * EMU_STACK_BYTES);
    emu_frags = (emu_fragments*)malloc((n + 31) / 32 * 32 * sizeof(emu_fragments));
    emu_capacity = (emu_threads && emu_stacks && emu_frags) ? n : 0;
    if (!emu_capacity) { snprintf(emu_error, sizeof emu_error, "%s: no memory for %lld threads", name, (long long)n); return 1; }
  }
  if (shared_bytes > emu_smem_capacity) {
    free(emu_smem);
    emu_smem = (unsigned char*)aligned_alloc(64, (shared_bytes + 63) / 64 * 64);
    emu_smem_capacity = emu_smem ? shared_bytes : 0;
    if (!emu_smem) { snprintf(emu_error, sizeof emu_error, "%s: no memory for shared memory", name); return 1; }
  }
  emu_failed = 0;
  emu_error[0] = 0;
  emu_body = body;
  emu_kernel = name;
  int64_t blocks = (int64_t)grid[0] * grid[1] * grid[2], stride = 1;
  static const int64_t primes[] = {7919, 104729, 1299709, 15485863};
  for (int p = 0; p < 4 && blocks > 1; ++p) if (blocks % primes[p]) { stride = primes[p]; break; }
  for (int64_t b = 0; b < blocks && !emu_failed; ++b) {
    int64_t lin = (b * stride + blocks / 2) % blocks;  /* every block once, in a scrambled order */
    emu_bid = (emu_dim3){(int32_t)(lin % grid[0]), (int32_t)(lin / grid[0] % grid[1]),
                         (int32_t)(lin / ((int64_t)grid[0] * grid[1]))};
    if (shared_bytes) memset(emu_smem, 0xff, shared_bytes);
    emu_block(block, n, barriers);
  }
  return emu_failed ? 1 : 0;
}
"""


class EmulationRenderer(GpuRenderer):
    """Renders lowered GPU kernels as C that runs them on the CPU with CUDA semantics."""

    INDEX = {**{f"blockIdx.{a}": f"emu_bid.{a}" for a in "xyz"}, **{f"threadIdx.{a}": f"emu_tid.{a}" for a in "xyz"}}
    SHARED_BASE = "emu_smem"
    UNROLL_PRAGMA = ""

    def render(self, func: PrimFunc) -> str:
        return self.render_module([func], timers=True)

    def render_module(self, funcs: list[PrimFunc], timers: bool = False, tail: str = "") -> str:
        """Kernels with the C back end's signatures (and, with `timers`, its timing entry points)."""
        self._helpers: dict[str, str] = {}
        bodies = [self._function(f, timers) for f in funcs]
        head = ["#define _GNU_SOURCE", "#include <math.h>", "#include <stdint.h>", "#include <stdio.h>",
                "#include <stdlib.h>", "#include <string.h>", "#include <time.h>", "#include <ucontext.h>",
                threads.runtime_source(), RUNTIME]
        return "\n".join(head + list(self._helpers.values()) + [""] + bodies + [tail])

    def _function(self, func: PrimFunc, timer: bool) -> str:
        g = self._begin(func).geometry
        self._sites = 0
        self._shuffles = False
        name = self.symbol(func)
        names = [self._name(b) for b in func.params]
        decls = param_decls(func, names)
        body = self._stmt(func.body, 1).rstrip("\n")
        casts = ", ".join(f"({d.rsplit('*', 1)[0]}*){name}_argv[{k}]" for k, d in enumerate(decls))
        # threads need coroutines of their own when they wait for each other: at barriers, shuffles and mmas
        barriers = int(self._shuffles or any(isinstance(s, (Barrier, WarpMma)) for s in walk_stmts(func.body)))
        lines = [f"static void {name}_body({', '.join(decls)}) {{", body, "}", "",
                 f"static void* {name}_argv[{len(decls)}];",
                 f"static void {name}_thread(void) {{ {name}_body({casts}); }}", "",
                 f"/* grid {g.grid}, block {g.block}, {g.shared_bytes} bytes of shared memory */",
                 f"{self.signature(func, names)} {{"]
        lines += [f"  {name}_argv[{k}] = (void*){n};" for k, n in enumerate(names)]
        lines += [f"  static const int32_t grid[3] = {{{', '.join(map(str, g.grid))}}}, "
                  f"block[3] = {{{', '.join(map(str, g.block))}}};",
                  f'  return emu_launch(grid, block, {g.shared_bytes}, {barriers}, {name}_thread, "{func.name}");',
                  "}", ""]
        if timer:
            lines.append(self._timing_entry(func))
        return "\n".join(lines)

    def _barrier(self) -> str:
        self._sites += 1
        return f"emu_barrier({self._sites});"

    def _shuffle_xor(self, value: str, lane_mask: str, width: str, ctype: str) -> str:
        self._shuffles = True
        return f"(({ctype})emu_shfl_xor((double)({value}), {lane_mask}, {width}, site))"

    def _async_copy(self, s: AsyncCopy, d: int) -> str:
        src = copy_source(s)
        dst = f"&{self._name(s.buffer)}[{self._checked(s.buffer, s.index)}]"
        if src is None:
            return f"{'  ' * d}*{dst} = {self._expr(s.value)};\n"
        load, cond = src
        at = f"&{self._name(load.source)}[{self._checked(load.source, load.indices[0])}]"
        if cond is not None:
            at = f"({self._expr(cond)}) ? {at} : NULL"
        return f"{'  ' * d}emu_cp_async({dst}, {at});\n"

    def _async_commit(self) -> str:
        return "emu_cp_commit();"

    def _async_wait(self, pending: int) -> str:
        return f"emu_cp_wait({pending});"

    def _mma(self, s: WarpMma) -> str:
        self._sites += 2
        accs = [f"&{self._name(s.acc)}[{self._checked(s.acc, i)}]" for i in s.c]
        precision = str(MMA_PRECISIONS.index(s.precision))
        return f"emu_mma_m16n8k8({', '.join([str(self._sites - 1), precision] + accs + [self._expr(x) for x in s.a + s.b])});"

    def _stmt(self, s, d: int) -> str:
        if isinstance(s, Store) and not isinstance(s, AsyncCopy):
            return f"{'  ' * d}{self._name(s.buffer)}[{self._checked(s.buffer, s.index)}] = {self._expr(s.value)};\n"
        return super()._stmt(s, d)

    def _expr(self, e: Expr) -> str:
        if isinstance(e, Load):
            return f"{self._name(e.source)}[{self._checked(e.source, e.indices[0])}]"
        return super()._expr(e)

    def _checked(self, buf, index: Expr) -> str:
        return f'emu_idx({self._expr(index)}, {buf.size}, "{buf.name}")'


__all__ = ["EmulationRenderer", "RUNTIME"]
