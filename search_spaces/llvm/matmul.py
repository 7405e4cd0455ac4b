"""CPU template for MatMul and Gemm (batched, transposed, dense-like, with fused epilogue).

The shape of the schedule is `autosched.ops.matmul.schedule_matmul`'s, with its constants as
knobs: A and B are repacked into mr-row and nr-column panels (`Packing(mr, nr)`), output
tiles are distributed over threads, and each tile accumulates in a local buffer whose
mr × nr register block is unrolled with its columns vectorized. The knobs:

- `mr`, `nr`: the register block (nr in whole vectors); mr · nr / lanes accumulators should
  fit the register file, which the tuner learns; rows stop where the widest block would pass
  `max_accumulators` of the target (16 rows with AVX-512's 32 registers, 8 with AVX2's 16);
- `mb`: register blocks per tile along the rows; with `tile_k` splitting the reduction into
  (blocks, steps, unrolled steps) the tile runs block by block, so one kc × nr slice of the B
  panel stays in L1 while the tile's mb row blocks stream past it;
- `tile_order`: column panels outside row blocks (B panel reused from cache) or the reverse;
- `parallel_depth`: how many outer tile loops (batch dims first) fuse into the parallel loop;
- `pack_a`: A packed into mr-row panels at every call, or read in place (rows broadcast from
  mr row streams, no copy; offered where A is neither transposed nor seen through a view that
  scatters its rows). In place, where mr · mb does not divide the rows, the last row tile is
  moved back to end at the last row (`Stage.split(shift=True)`: rows computed twice, alike);
  only fewer rows than one tile read A's padding through a guard in the inner loop;
- `pack_at` (batched products of activations only, attention's QKᵀ and PV): the packs run at
  root, each a parallel loop over the whole batch into the workspace, or inside the parallel
  tile loop, each iteration packing the panels its tiles read into a buffer of its own, still
  in L1 when they are read. Small matrices (Swin's 49 × 32 · 32 × 49 windows) spent more in
  the root packs and their barriers than in the product.
"""
from __future__ import annotations

from dataclasses import dataclass

from autosched import te
from autosched.graph.views import keeps_rows, operand_views, view_shape, view_tensor
from autosched.ops import matmul as mm
from autosched.ops.epilogue import EpilogueFn, add, apply_epilogue, scale
from autosched.ops.transform import INJECTIVE_TAG, PAD_TAG, pad
from autosched.ops.util import broadcast_load, local_accumulator, parallel_copy
from autosched.schedule import Schedule, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace, ReorderKnob, SplitKnob
from autosched.target import Target
from autosched.task import WEIGHT_INPUTS_ATTR, Task
from autosched.te import Tensor
from autosched.templates import TemplateError
from search_spaces.llvm.common import (
    CpuTemplate,
    TaskTensors,
    cpu_capabilities,
    inline_epilogue,
    max_accumulators,
    task_tensors,
    vector_lanes,
)

MR_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
NR_VECTORS = (1, 2, 3, 4)
MB_CHOICES = (1, 2, 4, 8)
MAX_UNROLLED_K = 8
TILE_ORDERS = (("j", "i"), ("i", "j"))
ROWS_TAG = "matmul_rows"


@dataclass(frozen=True)
class MatmulDims:
    """The problem sizes of a MatMul/Gemm task: output batch dims, m, n and the reduction k."""

    batch: tuple[int, ...]
    m: int
    n: int
    k: int


def matmul_dims(task: Task) -> MatmulDims:
    if task.op not in ("MatMul", "Gemm"):
        raise TemplateError(f"the matmul template does not handle op {task.op}")
    a, b = task.shapes[0], task.shapes[1]
    if task.op == "MatMul":
        view_a, view_b = operand_views(task.attrs)
        a, b = view_shape(a, view_a), view_shape(b, view_b)
    if len(a) < 2 or len(b) < 2:
        raise TemplateError(f"{task.op} with a 1-D operand ({list(a)}, {list(b)}) has no matmul template")
    attrs = dict(task.attrs)
    trans_a = task.op == "Gemm" and bool(attrs.get("transA", 0))
    trans_b = task.op == "Gemm" and bool(attrs.get("transB", 0))
    m, k = (a[-1], a[-2]) if trans_a else (a[-2], a[-1])
    n = b[-2] if trans_b else b[-1]
    out = task.out_shapes[0]
    return MatmulDims(tuple(out[:-2]), m, n, k)


def matmul_operands(task: Task, tt: TaskTensors) -> tuple[Tensor, Tensor]:
    """A and B as the product reads them: through MatMul's operand views (injective stages
    that the schedule inlines into the packing)."""
    a, b = tt.anchor[0], tt.anchor[1]
    if task.op != "MatMul":
        return a, b
    view_a, view_b = operand_views(task.attrs)
    return view_tensor(a, view_a), view_tensor(b, view_b)


def a_in_place(task: Task) -> bool:
    """Whether A can be read in place: not transposed, and seen through no view or one that keeps
    its rows contiguous (see `autosched.ops.matmul.default_packing`)."""
    if task.op == "Gemm":
        return not dict(task.attrs).get("transA", 0)
    return keeps_rows(task.shapes[0], operand_views(task.attrs)[0])


def packs_vary_by_batch(task: Task) -> bool:
    """Whether B's packed panels differ from one batch element to the next and are packed at every
    call: a batched MatMul whose B is an activation with batch dims of its own (never a weight,
    whose packing the build folds)."""
    if task.op != "MatMul" or 1 in dict(task.attrs).get(WEIGHT_INPUTS_ATTR, ()):
        return False
    b = view_shape(task.shapes[1], operand_views(task.attrs)[1])
    return len(b) > 2 and any(n > 1 for n in b[:-2])


PACK_AT = ("root", "tile")
#: the fallback packs per parallel iteration where one batch element's panels of B take at most
#: the tile order that walks each row block across every column panel
ROWS_OUTER = TILE_ORDERS[1]
#: a product writing more than this per matrix, from B panels of at most `ROWS_OUTER_B_BYTES`,
#: runs row blocks outermost in the fallback (`rows_outer`)
ROWS_OUTER_C_BYTES = 4 << 20
ROWS_OUTER_B_BYTES = 512 << 10


def rows_outer(d: MatmulDims) -> bool:
    """Whether the fallback runs row blocks outside column panels: where the output is far
    larger than any cache and B small enough to stay in L2 while each row block sweeps it, so
    that each thread writes whole rows of C, not a column panel's short pieces of every row.
    Whisper's attention scores (4 heads of 1500x64 . 64x1500, 36 MB out) took 7.9-8.0 ms with
    column panels outermost, 6.1-6.2 ms with row blocks (onnxruntime 6.1-6.7; in the model,
    EPYC Zen 4, 2 threads)."""
    return d.m * d.n * 4 > ROWS_OUTER_C_BYTES and d.k * d.n * 4 <= ROWS_OUTER_B_BYTES


#: this much (attention's: Swin's 49-token windows 8 KiB, BERT's 128 tokens 32 KiB, ViT's 197
#: 53 KiB), well inside any x86 core's L2; a larger product keeps the root packs, whose tiles
#: parallelize within one matrix (not measured per iteration)
PER_TILE_PANEL_BYTES = 128 * 1024


def _nr_choices(n: int, lanes: int) -> tuple[int, ...]:
    """Whole vectors up to the (rounded-up) width; a narrow output gets one exact panel."""
    if n < lanes:
        return (n,)
    return tuple(lanes * v for v in NR_VECTORS if lanes * v <= -(-n // lanes) * lanes)


def gemm_epilogue(c: Tensor | None, alpha: float, beta: float) -> tuple[EpilogueFn, ...]:
    """ONNX Gemm's alpha · (A·B) + beta · C as epilogue functions, applied to the output's rows."""
    fns: list[EpilogueFn] = [scale(alpha)] if alpha != 1.0 else []
    if c is not None and beta != 0.0:
        fns.append(add(c) if beta == 1.0 else lambda v, i: v + te.const(beta, v.dtype) * broadcast_load(c, i))
    return tuple(fns)


def _compute(task: Task, packing: mm.Packing, tile_rows: int) -> tuple[list[Tensor], Tensor]:
    """The task's computation with A's rows zero-padded to whole tiles of `tile_rows`, unless
    the row tiles are shifted (`packing.shifted`: every tile inside A's rows).

    A tile then never reads past the last packed panel, so its accumulator needs no guards
    (only the copy to the output does); the padded rows are dropped by an inlined stage.
    """
    tt = task_tensors(task)
    attrs = dict(task.attrs)
    gemm = task.op == "Gemm"
    trans_a, trans_b = gemm and bool(attrs.get("transA", 0)), gemm and bool(attrs.get("transB", 0))
    a, b = matmul_operands(task, tt)
    row_axis = a.ndim - 1 if trans_a else a.ndim - 2
    m = a.shape[row_axis]
    extra = 0 if packing.shifted else -(-m // tile_rows) * tile_rows - m
    if extra:
        a = pad(a, [(0, extra if d == row_axis else 0) for d in range(a.ndim)], name=f"{a.name}_rows")
    y = mm.matmul(a, b, trans_a, trans_b, packing=packing)
    if extra:
        core = y
        y = te.compute(core.shape[:-2] + (m, core.shape[-1]), lambda *i: core[i], name="matmul_rows", tag=ROWS_TAG)
    pre = gemm_epilogue(tt.anchor[2] if len(tt.anchor) > 2 else None, attrs.get("alpha", 1.0),
                        attrs.get("beta", 1.0)) if gemm else ()
    return list(tt.args), apply_epilogue(y, pre + tt.epilogue)


class MatmulTemplate(CpuTemplate):
    name = "matmul_packed_llvm"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        d = matmul_dims(task)
        lanes = vector_lanes(target, task.dtypes[0])
        outer = len(d.batch) + 2
        nr = _nr_choices(d.n, lanes)
        widest = -(-max(nr) // lanes)
        rows = tuple(v for v in MR_CHOICES if v <= d.m and v * widest <= max_accumulators(target))
        return ConfigSpace(self.name, (
            ChoiceKnob("mr", rows),
            ChoiceKnob("nr", nr),
            ChoiceKnob("mb", tuple(v for v in MB_CHOICES if v == 1 or v <= -(-d.m // 2))),
            SplitKnob("tile_k", d.k, 3, max_innermost=MAX_UNROLLED_K),
            ReorderKnob("tile_order", TILE_ORDERS),
            ChoiceKnob("parallel_depth", tuple(range(1, outer + 1))),
            ChoiceKnob("pack_a", (True, False) if a_in_place(task) else (True,)),
            *([ChoiceKnob("pack_at", PACK_AT)] if packs_vary_by_batch(task) else []),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """The op library's default schedule in this space (`mm.default_packing`'s register tile,
        the reduction unsplit, column panels outermost, every tile loop parallel), so an untuned
        build and the tuner's first trial are the schedule a model without records runs. Before
        it was queued, the tuned MLP build ran slower than its untuned one: 1000 trials never
        met the default, so its best record was worse (0.559 against 0.29 ms for 64×1024·1024×1024,
        AVX-512, 2 threads). On Intel's AVX-512 cores a wide, deep product takes the wide tile
        with its reduction in blocks (`mm.wide_k_block`), unrolled by 4, reading A in place with
        its last row tile shifted where 8 does not divide the rows (it took the shifted 8 x 32
        tile over the whole reduction there: Mixer-B's 196 x 512 . 512 x 2048 1.15x slower, the
        Mixer and ViT blocks 1.09x in the model, Xeon, 2 threads); a narrow product whose
        rows no in-place tile divides reads A in place all the same (`mm.narrow_in_place_tile`),
        which the op library's schedule cannot."""
        d = matmul_dims(task)
        space = self.space(task, target)
        trans_a = not a_in_place(task)
        caps = cpu_capabilities(target)
        packing = mm.default_packing(d.m, d.n, caps, trans_a=trans_a, k=d.k)
        block = mm.wide_k_block(d.m, d.n, d.k, caps)
        if block is not None and not trans_a and d.m >= 2 * mm.WIDE_TILE[0]:
            # the wide tile in place, its last row tile shifted back where 8 does not divide m
            packing = mm.Packing(mm.WIDE_TILE[0], mm.WIDE_TILE[1] * caps.lanes(4), pack_a=False)
        elif packing.pack_a and not trans_a:  # no in-place tile divides m: in place all the same, guarded
            # where n is narrow, else with the last row tile shifted back
            packing = mm.narrow_in_place_tile(d.m, d.n, caps) or mm.shifted_in_place_tile(d.m, d.n, caps) or packing
        rows, widths = space.knob("mr").values, space.knob("nr").values
        wide = block is not None and (packing.mr, packing.nr // caps.lanes(4)) == mm.WIDE_TILE
        tile_k = (d.k // block, block // 4, 4) if wide and block is not None else (1, d.k, 1)
        if tile_k not in {tuple(v) for v in space.knob("tile_k").values}:
            tile_k = (1, d.k, 1)
        varies = packs_vary_by_batch(task)
        per_tile = varies and d.k * -(-d.n // packing.nr) * packing.nr * 4 <= PER_TILE_PANEL_BYTES
        return space.from_values({
            **({"pack_at": "tile" if per_tile else "root"} if varies else {}),
            "mr": max([r for r in rows if r <= packing.mr] or rows[:1]),
            "nr": min(widths, key=lambda w: (abs(w - packing.nr), w)),
            "mb": 1,
            "tile_k": tile_k,
            "tile_order": ROWS_OUTER if rows_outer(d) else TILE_ORDERS[0],
            "parallel_depth": len(d.batch) if per_tile else len(d.batch) + 2,
            "pack_a": packing.pack_a,
        })

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        lanes = vector_lanes(target, task.dtypes[0])
        mr, nr, mb = config["mr"], config["nr"], config["mb"]
        _, k_mid, k_unroll = config["tile_k"]
        d = matmul_dims(task)
        shifted = not config["pack_a"] and d.m % (mr * mb) != 0 and d.m >= mr * mb
        args, out = _compute(task, mm.Packing(mr, nr, pack_a=config["pack_a"], shifted=shifted), mr * mb)
        s = create_schedule(out)
        anchor = next(st for st in s.stages if st.op.tag == mm.MATMUL_TAG)
        inline_epilogue(s, out, tags=(ROWS_TAG, PAD_TAG, INJECTIVE_TAG))
        per_tile = config.get("pack_at") == "tile"
        packs = [st for st in s.stages if st.op.tag == "pack"]
        if not per_tile:
            for st in packs:
                parallel_copy(st)
        acc = local_accumulator(s, anchor, out)

        o = s[out]
        axes = list(o.op.axes)
        batch = axes[:-2]
        io, ii = o.split(axes[-2], mr * mb, shift=shifted)
        jo, ji = o.split(axes[-1], nr)
        tiles = {"i": io, "j": jo}
        outer = batch + [tiles[a] for a in config["tile_order"]]
        o.reorder(*outer, ii, ji)
        depth = config["parallel_depth"]
        tile = o.fuse(*outer[:depth])
        o.parallel(tile)
        jv = lanes if nr % lanes == 0 else nr
        _, jiv = o.split(ji, jv)
        o.vectorize(jiv)
        s.compute_at(acc, o, o.leaf_axes[len(outer) - depth])
        for st in packs if per_tile else ():
            s.compute_at(st, o, tile)  # the panels this iteration's tiles read, and only those

        acc_axes = list(acc.op.axes)
        ci, cj = acc_axes[-2:]
        (ck,) = acc.op.reduce_axes
        cib, cii = acc.split(ci, mr)
        cjo, cjv = acc.split(cj, jv)
        ko, kin = acc.split(ck, k_mid * k_unroll)
        km, ku = acc.split(kin, k_unroll)
        acc.reorder(*acc_axes[:-2], ko, cib, km, ku, cii, cjo, cjv)
        acc.unroll(ku)
        acc.unroll(cii)
        acc.unroll(cjo)
        acc.vectorize(cjv)
        return s, args + [out]


TEMPLATE = MatmulTemplate()
