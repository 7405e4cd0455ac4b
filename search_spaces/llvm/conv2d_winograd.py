"""Winograd schedules for the CPU Conv templates (`autosched.ops.winograd`).

`conv2d.py` adds `winograd_knobs` to the blocked variant's space of eligible tasks (3×3,
stride 1, groups 1, any dilation; others keep their space unchanged) and hands configs whose
`algorithm` is not "direct" to `schedule_winograd_nchw`. `schedule_winograd` schedules the
stages of `conv2d_winograd_nchwc` wherever they sit, so an NCHW[x]c template can reuse it.

Knobs: `algorithm` (direct, winograd_2, winograd_4, winograd_6: F(m×m,3×3) for m = 2, 4, 6; F(6×6)
only on maps of `MIN_F6_SIZE` or more, `algorithms`), the channel
blocks `oc_bn`/`ic_bn` shared with the direct schedule, `wino_tile_t` (tiles per GEMM register
tile: `winograd.gemm_tile` of it, for which the op rounds its tile count up), `wino_gemm_order`
(whether a weight panel or a tile panel stays hot across the inner
parallel iterations) and the shared `pad` (padding at root or inlined into the input
transform).

The batched GEMM follows the direct blocked conv's register discipline: accumulators are
tile_t tiles × oc_bn/lanes vectors of output channels (innermost, vectorized), at most
`max_accumulators(target)`; each reduction step broadcasts one transformed input value per
tile against oc_bn/lanes weight vectors. Lanes come from the target, never the host.
Transforms vectorize along the channel block, unroll the tile positions (which folds their
select chains into constants) and run in parallel over tiles.
"""
from __future__ import annotations

from autosched.ops import conv_nchwc, winograd
from autosched.ops.transform import PAD_TAG
from autosched.ops.util import parallel_copy, vector_width
from autosched.schedule import Schedule, Stage, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace, Knob
from autosched.target import CpuCapabilities, Target
from autosched.task import Task
from autosched.te import IterVar, Tensor
from search_spaces.llvm.common import (
    ACCUMULATORS_PER_REGISTER,
    TaskTensors,
    check_register_tile,
    cpu_capabilities,
    inline_epilogue,
    task_tensors,
)

DIRECT = "direct"
ALGORITHMS = (DIRECT, "winograd_2", "winograd_4", "winograd_6")
TILE_T = (2, 4, 6, 7, 8, 12, 14, 16)
GEMM_ORDERS = ("oc_outer", "tile_outer")
#: the knobs of the ConvNCHWc template that its Winograd kernels read (`schedule_winograd_blocked`)
BLOCKED_KNOBS = frozenset({"algorithm", "wino_tile_t", "wino_gemm_order", "pad"})


def eligible(kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int], groups: int) -> bool:
    """Whether Winograd F(m×m, 3×3) computes this convolution (a dilated one per phase:
    `autosched.ops.winograd`)."""
    return tuple(kernel) == (3, 3) and tuple(stride) == (1, 1) and min(dilation) >= 1 and groups == 1


#: F(6×6) only where a phase's output map is at least this wide and tall: two whole tiles a side.
#: Its transformed weights are 64/9 of the filter's bytes (F(4): 4×), and on 7×7 maps its one
#: 12×12 tile a side would compute three outputs for each one kept
MIN_F6_SIZE = 12


def algorithms(out_hw: tuple[int, int], dilation: tuple[int, int]) -> tuple[str, ...]:
    """The `algorithm` values of an eligible task's space.

    F(6×6, 3×3), with points 0, ±1, ±2, ±1/2 (`autosched.ops.winograd`), rounds to 1.6e-5 and
    3.1e-5 of max |y| at 128 and 512 channels, five times F(4)'s error and within the check's
    1e-4. Alone, EPYC Zen 4, 2 threads, warm caches (knob variants of the untuned ConvNCHWc
    config, best of 5): 0.87 of F(4)'s time on a 40×40 map of 64 channels (CSP block), 0.95 on
    ResNet-18's 28×28 layer, 0.97-1.00 on 56×56 ones, 0.95-0.97 on VGG's 112×112 layer (361
    tiles, rounded up to a multiple of the register tile). Built as the fallback on maps of 14
    or more, ResNet-18, the CSP block and U-Net's decoder ran as fast as with F(4)
    (`benchmarks/models.py --baseline`, 40 runs, within noise): its weights are 64/9 of the
    filter's bytes, F(4)'s 4×. So it is a choice for the tuner, not a default."""
    return tuple(a for a in ALGORITHMS if a != "winograd_6" or min(phase_size(out_hw, dilation)) >= MIN_F6_SIZE)


def winograd_knobs(out_hw: tuple[int, int], dilation: tuple[int, int]) -> list[Knob]:
    """The knobs an eligible task's space gains (the algorithm first)."""
    return [ChoiceKnob("algorithm", algorithms(out_hw, dilation)), ChoiceKnob("wino_tile_t", TILE_T),
            ChoiceKnob("wino_gemm_order", GEMM_ORDERS)]


def algorithm(config: Config) -> str:
    """The config's algorithm; "direct" in a space without the knob."""
    return config.get("algorithm", DIRECT)


def tile_size(config: Config) -> int:
    """m of F(m×m, 3×3) for a Winograd config."""
    return int(config["algorithm"].rsplit("_", 1)[1])


def direct_values() -> dict[str, object]:
    """The added knobs at the direct algorithm (what a space without them would mean)."""
    return {"algorithm": DIRECT, "wino_tile_t": 7, "wino_gemm_order": GEMM_ORDERS[0]}


#: the fallback uses Winograd only where both channel counts are whole vectors and at least this many
MIN_FALLBACK_CHANNELS = 32
#: the fallback takes F(2) for channel counts that are not whole vectors from this many, both
#: ways (`fallback_values`)
MIN_UNALIGNED_CHANNELS = 16
#: F(4×4) for outputs at least this wide and tall (56, 28), F(2×2) below (14): on smaller maps
#: F(4)'s tiles overhang more and its transforms weigh more per GEMM step
MIN_F4_SIZE = 16
#: no Winograd in the fallback below this width or height (but see `SMALL_MAP_SIZE`): on 7×7
#: maps (2×2 tiles of 4, or 4×4 of 2, cover 8×8) the built F(2) fallback ran 1.4–1.5× the direct
#: kernel, 512 channels, 1 thread (2026-11-23, before the GEMM's tile order and register tiles)
MIN_FALLBACK_SIZE = 8
#: on cores without full-width 512-bit FMA pipes (Zen 4's AVX-512, AVX2), undilated layers whose
#: channel counts are both at least `SMALL_MAP_CHANNELS` take, in the blocked fallback, F(2) on
#: 7×7 maps too, and on 32 registers 8 tiles per register tile where 8 divide the tile count and
#: 7 do not (a 7×7 map's 16 tiles; measured when 7 fell to 4 there, the largest divisor, too few
#: accumulators); where 7 divide it (784 tiles of a 112×112 map) 7 ran 0.97 of 8's time
#: (`blocked_fallback_values`)
SMALL_MAP_CHANNELS = 128
SMALL_MAP_SIZE = 7
NARROW_TILE_T = 8
#: accumulators per GEMM register tile of the blocked fallback on cores with two full-width
#: 512-bit FMA pipes: Intel's AVX-512 cores and AMD's Zen 5 (`blocked_fallback_values`)
WIDE_TILE_ACCUMULATORS = 16
#: cores whose two FMA pipes execute 512-bit operations at full width (`CpuCapabilities.core`)
FULL_WIDTH_AMD_CORES = frozenset({"znver5"})


def phase_size(out_hw: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    """The output map of one phase of a dilated convolution (the largest): what its tiles cover."""
    h, w = (-(-size // d) for size, d in zip(out_hw, dilation))
    return h, w


def uses_f4(out_hw: tuple[int, int], dilation: tuple[int, int]) -> bool:
    """Whether the fallback's Winograd is F(4×4): on maps of at least `MIN_F4_SIZE`, and on the
    phases of every dilated convolution (those below `MIN_FALLBACK_SIZE` take no Winograd).
    There d² phases share each transformed weight, so F(4)'s weights, 4× the filter's bytes,
    serve 25 tiles or more where an undilated 14×14 map gives them 16. EPYC Zen 3, 2 threads,
    alone, medians of 3 (ConvNCHWc, blocks of 8), F(2) → F(4): 512 channels d=2 on 17×17
    (phases 9 and 8) 7.23 → 5.73 ms, d=4 on 33×33 29.3 → 23.4-24.3 ms, 256 channels d=4 on
    33×33 7.70 → 5.79, 128 channels 1.99 → 1.68; an undilated 14×14 map, 256 channels, keeps
    F(2): 0.72 against 0.87 ms."""
    return max(dilation) > 1 or min(out_hw) >= MIN_F4_SIZE


def fallback_values(space: ConfigSpace, channels: int, out_channels: int, out_hw: tuple[int, int],
                    dilation: tuple[int, int], lanes: int, target: Target) -> dict[str, object]:
    """The added knobs' values in an untuned build, with the channel blocks they need.

    Winograd for every eligible task with whole vectors of channels (≥ 32 of them) and maps of
    at least 8×8: with weight-only stages precomputed on both sides, ResNet-18's 56×56, 28×28
    and 14×14 layers ran in 0.35–0.65× the direct fallback's time (AVX-512, 1 thread,
    benchmarks/winograd.py). Blocks: `oc_bn` of 4 vectors where the target has 32 registers (2 with
    16), `ic_bn` of 2 vectors, 7 tiles per register tile (7 divides the tile counts 196 and 49
    of 56- and 28-wide maps under F(4), and of 28 and 14 under F(2)): ≤ 28 accumulators.
    Channel counts that are not whole vectors but at least `MIN_UNALIGNED_CHANNELS` both ways
    take F(2) with the direct fallback's blocks: alone (2 threads, EPYC Zen 4, best of 5), 3x3
    layers of 18 channels on 56x56 0.42 -> 0.20 ms, 26 on 56x56 0.62 -> 0.22, 36 on 28x28 0.29
    -> 0.13 (F(4) 0.14), 52 on 28x28 0.25 -> 0.17, 20 on 56x56 0.33 -> 0.26, but 12 on 56x56
    0.18 -> 0.32; in the model an HRNet-W18 stage ran 2.02x and a Res2Net bottleneck 1.45x
    faster. Otherwise the direct algorithm, whose knobs the caller sets. A dilated convolution's maps are
    judged by its phases (`phase_size`), its F(2) or F(4) by `uses_f4`."""
    if min(phase_size(out_hw, dilation)) < MIN_FALLBACK_SIZE:
        return direct_values()
    if (channels % lanes or out_channels % lanes) and min(channels, out_channels) >= MIN_UNALIGNED_CHANNELS:
        return {**direct_values(), "algorithm": "winograd_2"}
    if channels % lanes or out_channels % lanes or min(channels, out_channels) < MIN_FALLBACK_CHANNELS:
        return direct_values()
    wide = cpu_capabilities(target).vector_registers >= 32
    oc_bn = max(b for b in space.knob("oc_bn").values if b <= (4 if wide else 2) * lanes)
    ic_bn = max(b for b in space.knob("ic_bn").values if b <= 2 * lanes)
    return {"algorithm": "winograd_4" if uses_f4(out_hw, dilation) else "winograd_2", "oc_bn": oc_bn,
            "ic_bn": ic_bn, "wino_tile_t": 7, "wino_gemm_order": GEMM_ORDERS[0], "pad": "inline"
            if "inline" in space.knob("pad").values else space.knob("pad").values[0]}


def blocked_fallback_values(channels: int, out_channels: int, out_hw: tuple[int, int], dilation: tuple[int, int],
                            in_block: int, out_block: int, lanes: int,
                            caps: CpuCapabilities | None = None) -> dict[str, object]:
    """The added knobs of the ConvNCHWc template's fallback: Winograd on the same terms as
    `fallback_values` (blocks are the graph's there: whole vectors both ways), else direct.

    The GEMM's parallel items run the output blocks innermost ("tile_outer"): each thread keeps
    a panel of transformed tiles hot while the weight panels stream past it. In the model
    (`model_check.kernel_seconds`, 20 alternated rounds, EPYC Zen 5, 2 threads) that took 0.90
    of the other order's time on ResNet-18's 28x28 layers, 0.93 on its 14x14 ones, 0.87-0.92 on
    VGG's and U-Net's 128- and 256-channel layers and 0.84-0.86 on the 40x40 and 33x33 maps of
    the CSP and DeepLab blocks; 64-channel 56x56 and 112x112 layers were unchanged (0.98-1.00).
    AVX2 code on the same host: 0.74-0.92 on maps of 128 channels or more, 1.00-1.03 at 64.

    On cores whose two 512-bit FMA pipes of 4-cycle latency keep 8 independent accumulators busy
    (Intel's AVX-512 cores, Zen 5: `caps`; 32 registers), the register tile is up to
    `WIDE_TILE_ACCUMULATORS` vectors rather than 7 tiles of a one-vector block, of those the
    one that pads the tile count least (`_unpadded_tile_t`). On a Xeon
    (Sapphire Rapids class, 2 threads, blocks of 16), ResNet-18's 56×56 layers ran 0.350 → 0.316
    ms alone (14 tiles; median of 4 interleaved rounds) and 0.36-0.38 → 0.33-0.35 in the model;
    on Zen 5, with the order above, VGG's 56x56 layers 0.96 → 0.87-0.89 of the other order's
    time, U-Net's 0.99 → 0.92. Smaller maps keep the narrower limits there too: F(2) on the 7×7 layers (16 tiles)
    and F(4) on the 14×14 ones ran 0.625 and 0.416 ms alone against 0.964 and 0.484, yet
    ResNet-18 built with them ran 0.94-0.96× as fast (100 alternated runs, twice): their
    transformed weights (16/9 and 4× the filter's bytes) come from memory in the model, and
    timed cold alone the 7×7 F(2) layer ran as slow as the direct one (1.26 ms).

    Elsewhere (`SMALL_MAP_SIZE`, `SMALL_MAP_CHANNELS`) the direct kernel is the slower one there:
    on an EPYC Zen 4, 2 threads, F(2) took 0.79-0.83 of the direct kernel's time in the model
    (`model_check.kernel_seconds`, 10 alternated rounds) on ResNet-18's 512-channel 7×7 layers,
    0.81-0.82 on GoogLeNet's 160 -> 320 and 192 -> 384, 0.75-0.78 at 1 thread, and 0.67 for the
    AVX2 build of those layers on the same host; `benchmarks/models.py --baseline`, 40 runs:
    ResNet-18 1.05x (twice), Wide ResNet-50 1.04x, ResNet-50 and GoogLeNet 1.01x faster.
    DenseNet-121's 128 -> 32 layers on 7×7 (20 us each) gained nothing and the 1x1 layers after
    them ran 9-18% slower: hence the channel floor. Dilated phases keep `MIN_FALLBACK_SIZE`.
    8 tiles per register tile rather than 4 (`NARROW_TILE_T`): 0.79-0.95 of the 7×7 F(2) kernel's
    time in the model on that Zen 4 (five alternations, quiet and slow phases of the host),
    GoogLeNet's two 0.75-0.84; the AVX2 build 1.16 (16 registers).
    F(4) with 8 tiles on 14×14 maps took 0.87-0.88 of F(2)'s time there in quiet phases of the
    host and 1.14-1.20 in a slow one, so those keep F(2)."""
    wide = caps is not None and caps.vector_registers >= 32 and (
        caps.vendor == "intel" or caps.core in FULL_WIDTH_AMD_CORES)
    # half-width pipes, undilated, many channels: F(2) on 7x7 maps too, wider register tiles on 32 registers
    narrow = not wide and max(dilation) == 1 and min(channels, out_channels) >= SMALL_MAP_CHANNELS
    if (in_block % lanes or out_block % lanes or channels % lanes or out_channels % lanes
            or min(channels, out_channels) < MIN_FALLBACK_CHANNELS
            or min(phase_size(out_hw, dilation)) < (SMALL_MAP_SIZE if narrow else MIN_FALLBACK_SIZE)):
        return direct_values()
    f4 = uses_f4(out_hw, dilation)
    vectors = out_block // lanes
    th, tw = winograd.tile_counts(*out_hw, 4 if f4 else 2)
    tiles = th * tw
    if wide:
        tile_t = _unpadded_tile_t(tiles, [t for t in TILE_T if t * vectors <= WIDE_TILE_ACCUMULATORS] or [TILE_T[0]])
    else:
        registers = caps.vector_registers if caps is not None else 0
        eight = (narrow and registers >= 32 and tiles % NARROW_TILE_T == 0 and tiles % 7 != 0
                 and NARROW_TILE_T * vectors <= ACCUMULATORS_PER_REGISTER * registers)
        tile_t = NARROW_TILE_T if eight else 7
    return {"algorithm": "winograd_4" if f4 else "winograd_2", "wino_tile_t": tile_t, "wino_gemm_order": "tile_outer"}


def _unpadded_tile_t(tiles: int, candidates: list[int]) -> int:
    """Of `candidates` (register tiles that fit), the one whose GEMM tile (`winograd.gemm_tile`)
    pads the tile count least, then the widest. The count is one image's: a divisor of it
    divides every batch's. On a Xeon (Sapphire Rapids class, 2 threads, alone, warm) 16 tiles
    per register tile padded the 49 tiles of ResNet-18's 28x28 (F(4)) and 14x14 (F(2)) layers
    to 64 and ran 0.73-0.74 ms, 7 of them 0.47-0.49 ms; timed cold, 0.90 -> 0.61 and 1.31 -> 0.92."""
    def cost(t: int) -> tuple[int, int]:
        g = winograd.gemm_tile(tiles, t)
        return -(-tiles // g) * g, -g

    return min(candidates, key=cost)


def schedule_winograd_blocked(tt: TaskTensors, config: Config, target: Target, lanes: int,
                              padding: tuple[int, ...], dilation: tuple[int, int], out_block: int,
                              bias_epilogue: tuple = ()) -> tuple[Schedule, list[Tensor]]:
    """A ConvNCHWc task's tensors (input and output in channel blocks, fixed by layout planning)
    through `conv2d_winograd_nchwc`; `bias_epilogue` (the template's blocked bias, over the same
    tensors) is applied first."""
    out = winograd.conv2d_winograd_nchwc(tt.anchor[0], tt.anchor[1], None, padding, dilation, m=tile_size(config),
                                         oc_bn=out_block, tile_multiple=config["wino_tile_t"],
                                         epilogue=tuple(bias_epilogue) + tuple(tt.epilogue))
    s = create_schedule(out)
    schedule_winograd(s, config, target, lanes, blocked_out=out)
    return s, list(tt.args) + [out]


def _vectorize_last(st: Stage, axis: IterVar, lanes: int) -> None:
    """Vectorize `axis` (the stage's innermost, channels) by one vector of the target, the
    vectors beyond the first unrolled."""
    extent = st.op.shape[-1]
    if extent % lanes == 0 and extent > lanes:
        outer, axis = st.split(axis, lanes)
        st.unroll(outer)
    st.vectorize(axis)


def schedule_winograd(s: Schedule, config: Config, target: Target, lanes: int, blocked_out: Tensor | None = None
                      ) -> Stage:
    """Schedule the Winograd stages of `s`: padding, weight and input transforms, the batched
    GEMM (register-tiled) and the output transform. `blocked_out` is the computation's output
    when it is blocked (`conv2d_winograd_nchwc` with its epilogue, which is inlined into it);
    None leaves the output transform for the caller to place (the NCHW unpacking computes it
    per row of tiles). Returns the output transform's stage."""
    stage = {st.op.tag: st for st in s.stages}
    for st in s.stages:
        if st.op.tag == PAD_TAG and config["pad"] == "inline":
            s.compute_inline(st)
        elif st.op.tag in (PAD_TAG, conv_nchwc.PACK_TAG):  # the padding, input and weight packing
            parallel_copy(st)
    # weights: computed at build time in a model (reads only weights), each call while tuning
    _weight_pass(stage[winograd.WEIGHT_TAG], lanes)
    # its first pass stays at root: `autosched.compile.model` precomputes only stages at root, and a
    # stage computed inside U's loops would make U look like run-time work
    _weight_pass(stage[winograd.WEIGHT_ROWS_TAG], lanes)

    v = stage[winograd.INPUT_TAG]
    e, nu, cb, t, ci = v.op.axes
    v.reorder(cb, t, e, nu, ci)
    tile = v.fuse(cb, t)
    v.parallel(tile)
    v.unroll(e)
    v.unroll(nu)
    _vectorize_last(v, ci, lanes)
    _per_tile(s, stage[winograd.INPUT_ROWS_TAG], v, tile, lanes)

    _schedule_gemm(s, stage[winograd.GEMM_TAG], config, target, lanes)

    y = stage[winograd.OUTPUT_TAG]
    m = y.op.attrs["m"]
    if blocked_out is not None and blocked_out.op is not y.op:
        inline_epilogue(s, blocked_out, tags=(winograd.OUTPUT_TAG,))
        y = s[blocked_out]
    n, o, oh, ow, ob = y.op.axes
    dh, dw = stage[winograd.OUTPUT_TAG].op.attrs["dilation"]
    # a dilated convolution's tile holds every d-th row and column: phases outside the tiles
    (ohp, oho, ohi), (owp, owo, owi) = _phase_tiles(y, oh, m, dh), _phase_tiles(y, ow, m, dw)
    y.reorder(*(a for a in (n, o, ohp, oho, owp, owo, ohi, owi, ob) if a is not None))
    if blocked_out is not None:  # else the caller's loops around it run in parallel
        y.parallel(y.fuse(*(a for a in (n, o, ohp, oho) if a is not None)))
    y.unroll(ohi)
    y.unroll(owi)
    _vectorize_last(y, ob, lanes)
    _per_tile(s, stage[winograd.OUTPUT_ROWS_TAG], y, owo, lanes)
    return y


def _phase_tiles(st: Stage, axis: IterVar, m: int, d: int) -> tuple[IterVar | None, IterVar, IterVar]:
    """(phase, tile, position in the tile) loops of an output axis of dilation d (no phase loop at 1)."""
    if d == 1:
        return (None, *st.split(axis, m))
    rows, phase = st.split(axis, d)
    return (phase, *st.split(rows, m))


def _weight_pass(st: Stage, lanes: int) -> None:
    """One pass of the weight transform at root: parallel over (output block, input channel),
    the tile positions unrolled (folding the select chains into constant sums), the block of
    output channels vectorized."""
    e, nu, o, c, ob = st.op.axes
    st.reorder(o, c, e, nu, ob)
    st.parallel(st.fuse(o, c))
    st.unroll(e)
    st.unroll(nu)
    _vectorize_last(st, ob, lanes)


def _per_tile(s: Schedule, rows: Stage, parent: Stage, tile_loop: IterVar, lanes: int) -> None:
    """A transform's first 1-D pass, computed for one tile inside the second's loop over
    tiles: α × α (or α × m) vectors that stay in registers or L1."""
    s.compute_at(rows, parent, tile_loop)
    a, b, _, _, c = rows.op.axes
    rows.unroll(a)
    rows.unroll(b)
    _vectorize_last(rows, c, lanes)


def _schedule_gemm(s: Schedule, mm: Stage, config: Config, target: Target, lanes: int) -> None:
    """M[ε, ν, OC/bo, T, bo]: register tiles of tile_t tiles × bo channels, reduction outside them."""
    _, _, _, tiles, bo = mm.op.shape
    tile_t = winograd.gemm_tile(tiles, config["wino_tile_t"])
    vec = lanes if bo % lanes == 0 else bo
    check_register_tile(tile_t * (bo // vec), config, target)
    acc = s[s.cache_write(Tensor(mm.op), "local")]
    # `mm` now copies the accumulator out: its loops place the register tiles
    e, nu, o, t, ob = mm.op.axes
    to, ti = mm.split(t, tile_t)
    outer = [e, nu, o, to] if config["wino_gemm_order"] == "oc_outer" else [e, nu, to, o]
    mm.reorder(*outer, ti, ob)
    mm.parallel(mm.fuse(*outer))
    obo, obv = mm.split(ob, vec) if bo > vec else (None, ob)
    mm.vectorize(obv)
    s.compute_at(acc, mm, mm.leaf_axes[0])

    e, nu, o, t, ob = acc.op.axes
    rc, ri = acc.op.reduce_axes
    obo, obv = acc.split(ob, vec)
    acc.reorder(e, nu, o, rc, ri, t, obo, obv)
    acc.unroll(t)
    acc.unroll(obo)
    acc.vectorize(obv)


def schedule_winograd_nchw(task: Task, config: Config, target: Target, lanes: int, padding: tuple[int, ...],
                           dilation: tuple[int, int]) -> tuple[Schedule, list[Tensor]]:
    """The NCHW task through `conv2d_winograd` (pack, Winograd, unpack + bias + epilogue)."""
    tt = task_tensors(task)
    oc_bn, ic_bn = config["oc_bn"], config["ic_bn"]
    out = winograd.conv2d_winograd(tt.anchor[0], tt.anchor[1], tt.anchor[2] if len(tt.anchor) > 2 else None,
                                   padding=padding, dilation=dilation, m=tile_size(config), ic_bn=ic_bn, oc_bn=oc_bn,
                                   tile_multiple=config["wino_tile_t"], epilogue=tt.epilogue)
    s = create_schedule(out)
    inline_epilogue(s, out, tags=(conv_nchwc.UNPACK_TAG,))
    y = schedule_winograd(s, config, target, lanes)
    # the output transform fills one row of tiles (m rows × OW × oc_bn, in L1; m·d rows holding
    # a row of tiles of each of the d phases where dilated) that the unpacking then transposes
    # to NCHW rows
    o = s[out]
    n, oc, oh, ow = o.op.axes
    oco, oci = o.split(oc, oc_bn)
    oho, ohi = o.split(oh, tile_size(config) * dilation[0])
    o.reorder(n, oco, oho, ohi, oci, ow)
    o.parallel(o.fuse(n, oco, oho))
    width = vector_width(o.op.shape[-1], lanes)  # a divisor where one exists: no scalar tail
    owo, owv = o.split(ow, width) if o.op.shape[-1] > width else (None, ow)
    o.vectorize(owv)
    s.compute_at(y, o, o.leaf_axes[0])
    return s, list(tt.args) + [out]


__all__ = ["ALGORITHMS", "BLOCKED_KNOBS", "DIRECT", "NARROW_TILE_T", "SMALL_MAP_CHANNELS", "SMALL_MAP_SIZE", "eligible", "phase_size", "algorithms", "winograd_knobs", "algorithm", "tile_size", "fallback_values", "direct_values", "blocked_fallback_values", "schedule_winograd_blocked",
           "schedule_winograd", "schedule_winograd_nchw"]
