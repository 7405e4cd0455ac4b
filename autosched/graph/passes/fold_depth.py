"""Convolutions and pools over three spatial axes as 2-D ones over batches of depths.

Video and volumetric models (R3D, R(2+1)D, S3D, 3-D U-Nets) convolve [N, C, D, H, W] tensors.
The compiled convolutions are 2-D, with their layouts, templates, Winograd kernels and tuned
records. A 3-D convolution is one: each output depth `o` reads the KD input depths
`o·sd + kd·dd` (after the depth padding), so stacking those KD depths on the channel axis gives
an image of KD·C channels, and the 3-D filter [O, C/g, KD, KH, KW] is a 2-D one over them. All
Do output depths are one 2-D convolution of batch N·Do. A 3-D max or average pool is its 2-D
pool over every depth, then the max or the mean over the depth windows.

Between them a clip is kept as its depths, a batch of [C, H, W] images (depth-major,
[N, D, C, H, W], viewed as [N·D, C, H, W]): a convolution's result is its 2-D output as it is,
the elementwise ops after it (a ReLU, a residual Add) run on those images and fuse into its
epilogue, and a Transpose back to NCDHW is made only for other readers and graph outputs. For a
clip of one without groups, a convolution's depth windows are slices of the images' batch and
its stacking a Concat on channels in the order (kd, c), the depth padding a Concat with zeros:
layout planning keeps all of it in channel blocks, where a Pad and a stacking along a new axis
ran in the plain layout with a conversion there and back around every 3-D convolution (S3D spent
15-20% of its time in them). With groups, or several clips, the windows are slices of the
depth-major view stacked in the order (c, kd), which keeps each group's channels together.
"""
from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

#: NCDHW -> depth-major [N, D, C, H, W], and back
TO_DEPTH_MAJOR = (0, 2, 1, 3, 4)


def fold_depth(graph: Graph) -> Graph:
    """`graph` with every Conv, MaxPool and AveragePool of a 5-D input computed by 2-D ones."""
    if not any(n.op in (Op.CONV, Op.MAX_POOL, Op.AVERAGE_POOL) and len(graph.values[n.inputs[0]].shape) == 5
               for n in graph.nodes):
        return graph
    constants = dict(graph.constants)
    value = NewValues(graph)
    nodes: list[Node] = []
    major: dict[str, str] = {}  # an NCDHW value -> its depth-major twin
    planar: dict[str, str] = {}  # a depth-major twin -> the [N·D, C, H, W] batch of images it is a view of
    pending: dict[str, Node] = {}  # an NCDHW value computed only as a twin so far -> the Transpose that makes it
    made: set[str] = set()  # the NCDHW values whose Transpose is in `nodes`

    def depth_major(name: str) -> str:
        """The depth-major twin of an NCDHW value, transposed where it has none."""
        if name not in major:
            n, c, d, h, w = graph.values[name].shape
            major[name] = value(f"{name}_depth_major", (n, d, c, h, w), graph.values[name].dtype)
            nodes.append(Node(f"{name}/depth_major", Op.TRANSPOSE, (name,), (major[name],), {"perm": TO_DEPTH_MAJOR}))
        return major[name]

    def as_images(twin: str) -> str:
        """A depth-major value as the [N·D, C, H, W] batch of images it is (a Reshape: no kernel),
        where the elementwise ops run: fused into a convolution's epilogue where one made it."""
        if twin not in planar:
            made_here = next(v for v in value.values if v.name == twin)  # twins are all values this pass made
            n, d, c, h, w = made_here.shape
            planar[twin] = value(f"{twin}_2d", (n * d, c, h, w), made_here.dtype)
            nodes.append(Node(f"{twin}/images", Op.RESHAPE, (twin,), (planar[twin],), {"shape": (n * d, c, h, w)}))
        return planar[twin]

    def need(name: str) -> None:
        """An NCDHW value some node reads: its Transpose back from the twin, once, before that node."""
        if name in pending and name not in made:
            nodes.append(pending[name])
            made.add(name)

    for node in graph.nodes:
        if node.op is Op.CONV and len(graph.values[node.inputs[0]].shape) == 5:
            result, planar[result] = _conv(graph, node, as_images(depth_major(node.inputs[0])), constants, value, nodes)
        elif node.op in (Op.MAX_POOL, Op.AVERAGE_POOL) and len(graph.values[node.inputs[0]].shape) == 5:
            result, images = _pool(graph, node, as_images(depth_major(node.inputs[0])), constants, value, nodes)
            if images is not None:
                planar[result] = images
        elif _runs_on_images(graph, node, major, constants):
            out = graph.values[node.outputs[0]]
            n, c, d, h, w = out.shape
            result = value(f"{out.name}_depth_major", (n, d, c, h, w), out.dtype)
            images = value(f"{out.name}_2d", (n * d, c, h, w), out.dtype)
            operands = tuple(as_images(major[i]) if i in major else i for i in node.inputs)
            nodes.append(Node(node.name, node.op, operands, (images,), node.attrs))
            nodes.append(Node(f"{node.name}/depths", Op.RESHAPE, (images,), (result,), {"shape": (n, d, c, h, w)}))
            planar[result] = images
        else:
            for name in node.inputs:
                need(name)
            nodes.append(node)
            continue
        y = node.outputs[0]
        major[y] = result
        pending[y] = Node(f"{node.name}/ncdhw", Op.TRANSPOSE, (result,), (y,), {"perm": TO_DEPTH_MAJOR})
    for v in graph.outputs:
        need(v.name)
    return rebuild(graph, nodes, constants, value.values)


def _runs_on_images(graph: Graph, node: Node, major: dict[str, str], constants: dict) -> bool:
    """An elementwise node of one output whose operands are depth-major twins of its output's
    shape or scalar constants (at least one a twin): computed on the twins' images."""
    if kind_of(node.op) is not OpKind.ELEMWISE or len(node.outputs) != 1:
        return False
    shape = graph.values[node.outputs[0]].shape
    twins = [i for i in node.inputs if i in major]
    return bool(twins) and all(
        (i in major and graph.values[i].shape == shape) or (i in constants and constants[i].size == 1)
        for i in node.inputs)


def _depth_windows(name: str, shape: tuple[int, ...], axis: int, dtype: str, node: Node, kd: int, d_out: int,
                   fill: float, constants: dict, value: NewValues, nodes: list[Node]) -> list[str]:
    """The `kd` slices of `name`, whose depths lie along `axis` (a clip's images [D, C, H, W] on
    0, a depth-major [N, D, C, H, W] on 1), that output depths 0..d_out-1 of the 3-D window op
    `node` read at each depth tap, each of d_out depths. The depth padding (and what ceil mode
    adds at the end) is a Concat with `fill` expanded from a scalar: on the images, layout
    planning keeps a Concat and Slices of the batch axis in channel blocks, where a Pad would
    be converted to the plain layout and back."""
    depth = shape[axis]
    at = node.attrs
    sd, dd = at.get("strides", (1, 1, 1))[0], at.get("dilations", (1, 1, 1))[0]
    pd0, pd1 = at.get("pads", (0,) * 6)[0], at.get("pads", (0,) * 6)[3]
    pd1 += max(0, (d_out - 1) * sd + dd * (kd - 1) + 1 - (depth + pd0 + pd1))
    src, total = name, depth + pd0 + pd1
    if pd0 or pd1:
        scalar = value(f"{node.name}_depth_fill", (1,) * len(shape), dtype)
        constants[scalar] = np.full((1,) * len(shape), fill, np.dtype(dtype))
        parts = []
        for label, size in (("front", pd0), ("", 0), ("back", pd1)):
            if not label:
                parts.append(name)
            elif size:
                fill_shape = (*shape[:axis], size, *shape[axis + 1:])
                parts.append(value(f"{name}_{label}_of_{node.name}", fill_shape, dtype))
                nodes.append(Node(f"{node.name}/depth_{label}", Op.EXPAND, (scalar,), (parts[-1],), {"shape": fill_shape}))
        src = value(f"{name}_depth_padded_{node.name}", (*shape[:axis], total, *shape[axis + 1:]), dtype)
        nodes.append(Node(f"{node.name}/depth_pad", Op.CONCAT, tuple(parts), (src,), {"axis": axis}))
    windows = []
    for k in range(kd):
        start = k * dd
        part = src
        if (start, sd, d_out) != (0, 1, total):
            part = value(f"{name}_depth{k}_of_{node.name}", (*shape[:axis], d_out, *shape[axis + 1:]), dtype)
            stop = start + sd * (d_out - 1) + 1
            nodes.append(Node(f"{node.name}/depth{k}", Op.SLICE, (src,), (part,), {
                "starts": tuple(start if i == axis else 0 for i in range(len(shape))),
                "ends": tuple(stop if i == axis else e for i, e in enumerate(shape)),
                "steps": tuple(sd if i == axis else 1 for i in range(len(shape)))}))
        windows.append(part)
    return windows


def _pool(graph: Graph, node: Node, x_images: str, constants: dict, value: NewValues, nodes: list[Node]
          ) -> tuple[str, str | None]:
    """Emit `node` (a 3-D MaxPool or AveragePool) as its 2-D pool over every depth, then the max
    or the mean over the depth windows; returns the depth-major name of its result and, for a
    clip of one, the images that is a view of. Both are separable: a 3-D window's max is the max
    over its depths of their 2-D windows' maxima, and the elements an average counts are those
    of each axis multiplied, so its 2-D averages summed over the depths need only the depth's
    count as a divisor (per output depth, since windows over the padding count fewer)."""
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    n, c, depth, h, w = x.shape
    _, _, d_out, h_out, w_out = y.shape
    dt, at = x.dtype, node.attrs
    kd, kh, kw = at["kernel_shape"]
    sd, sh, sw = at["strides"]
    dd, dh, dw = at["dilations"]
    pd0, ph0, pw0, pd1, ph1, pw1 = at["pads"]
    pooled2d = value(f"{y.name}_per_depth", (n * depth, c, h_out, w_out), dt)
    attrs = {**at, "kernel_shape": (kh, kw), "strides": (sh, sw), "dilations": (dh, dw), "pads": (ph0, pw0, ph1, pw1)}
    nodes.append(Node(node.name, node.op, (x_images,), (pooled2d,), attrs))
    # a clip of one: its depths are the images' batch; else the windows of the depth-major view
    axis, source, shape = 0, pooled2d, (depth, c, h_out, w_out)  # type: tuple[int, str, tuple[int, ...]]
    if n > 1:
        axis, shape = 1, (n, depth, c, h_out, w_out)
        source = value(f"{y.name}_per_depth_major", shape, dt)
        nodes.append(Node(f"{node.name}/depths", Op.RESHAPE, (pooled2d,), (source,), {"shape": shape}))
    maximum = node.op is Op.MAX_POOL
    fill = float(np.finfo(np.dtype(dt)).min) if maximum else 0.0  # a real element of every window is larger
    windows = _depth_windows(source, shape, axis, dt, node, kd, d_out, fill, constants, value, nodes)
    out_shape = (*shape[:axis], d_out, *shape[axis + 1:])
    result = windows[0]
    for k, part in enumerate(windows[1:], 1):
        total = value(f"{y.name}_depths_to{k}", out_shape, dt)
        nodes.append(Node(f"{node.name}/depth_{'max' if maximum else 'sum'}{k}", Op.MAX if maximum else Op.ADD,
                          (result, part), (total,)))
        result = total
    if not maximum:
        counted = (0, depth + pd0 + pd1) if at.get("count_include_pad", 0) else (pd0, pd0 + depth)
        counts = [sum(counted[0] <= o * sd + k * dd < counted[1] for k in range(kd)) for o in range(d_out)]
        scale_shape = tuple(d_out if i == axis else 1 for i in range(len(out_shape)))
        scale = value(f"{y.name}_depth_counts", scale_shape, dt)
        constants[scale] = (1.0 / np.array(counts, dtype=np.float64)).astype(dt).reshape(scale_shape)
        mean = value(f"{y.name}_depth_mean", out_shape, dt)
        nodes.append(Node(f"{node.name}/depth_mean", Op.MUL, (result, scale), (mean,)))
        result = mean
    if n > 1:
        return result, None
    major = value(f"{y.name}_depth_major", (1, d_out, c, h_out, w_out), dt)
    nodes.append(Node(f"{node.name}/depth_major", Op.RESHAPE, (result,), (major,), {"shape": (1, d_out, c, h_out, w_out)}))
    return major, result


def _conv(graph: Graph, node: Node, x_images: str, constants: dict, value: NewValues, nodes: list[Node]
          ) -> tuple[str, str]:
    """Emit `node` (a 3-D Conv) as a 2-D one over the depth windows of `x_images` (the input's
    [N·D, C, H, W] images); returns the depth-major name of its result and the 2-D one that is a
    view of. For a clip of one without groups the windows are slices of the images' batch,
    stacked on channels in the order (kd, c), all in channel blocks; otherwise slices of the
    depth-major view, stacked in the order (c, kd), which keeps each group's channels together."""
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    n, c, depth, h, w = x.shape
    _, o, d_out, h_out, w_out = y.shape
    dt = x.dtype
    at = node.attrs
    kd, kh, kw = graph.values[node.inputs[1]].shape[2:]
    _, sh, sw = at.get("strides", (1, 1, 1))
    _, dh, dw = at.get("dilations", (1, 1, 1))
    _, ph0, pw0, _, ph1, pw1 = at.get("pads", (0,) * 6)
    images = value(f"{x.name}_windows_of_{node.name}", (n * d_out, c * kd, h, w), dt)
    by_taps = n == 1 and at.get("group", 1) == 1
    if by_taps:
        windows = _depth_windows(x_images, (depth, c, h, w), 0, dt, node, kd, d_out, 0.0, constants, value, nodes)
        if kd == 1:
            images = windows[0]
        else:
            nodes.append(Node(f"{node.name}/stack", Op.CONCAT, tuple(windows), (images,), {"axis": 1}))
    else:
        x_major = value(f"{x.name}_depth_major_of_{node.name}", (n, depth, c, h, w), dt)
        nodes.append(Node(f"{node.name}/depth_major", Op.RESHAPE, (x_images,), (x_major,), {"shape": (n, depth, c, h, w)}))
        windows = _depth_windows(x_major, (n, depth, c, h, w), 1, dt, node, kd, d_out, 0.0, constants, value, nodes)
        taps = []
        for k, part in enumerate(windows):  # [N, Do, C, 1, H, W]: channel c·KD + kd once stacked
            tap = value(f"{part}_tap", (n, d_out, c, 1, h, w), dt)
            nodes.append(Node(f"{node.name}/tap{k}", Op.RESHAPE, (part,), (tap,), {"shape": (n, d_out, c, 1, h, w)}))
            taps.append(tap)
        stacked = value(f"{x.name}_stacked_of_{node.name}", (n, d_out, c, kd, h, w), dt)
        nodes.append(Node(f"{node.name}/stack", Op.CONCAT, tuple(taps), (stacked,), {"axis": 3}))
        nodes.append(Node(f"{node.name}/images", Op.RESHAPE, (stacked,), (images,), {"shape": (n * d_out, c * kd, h, w)}))
    w_name, *bias = node.inputs[1:]
    filters = graph.values[w_name]
    w_shape = (filters.shape[0], filters.shape[1] * kd, kh, kw)
    # [O, C/g, KD, KH, KW] read as (kd, c) or (c, kd) input channels
    w2 = value(f"{w_name}_2d", w_shape, filters.dtype)
    if w_name in constants:
        constants[w2] = np.ascontiguousarray(
            (constants[w_name].transpose(0, 2, 1, 3, 4) if by_taps else constants[w_name]).reshape(w_shape))
    else:
        source = w_name
        if by_taps:
            source = value(f"{w_name}_by_taps", (filters.shape[0], kd, filters.shape[1], kh, kw), filters.dtype)
            nodes.append(Node(f"{node.name}/weight_taps", Op.TRANSPOSE, (w_name,), (source,), {"perm": (0, 2, 1, 3, 4)}))
        nodes.append(Node(f"{node.name}/weight_2d", Op.RESHAPE, (source,), (w2,), {"shape": w_shape}))
    out2d = value(f"{y.name}_2d", (n * d_out, o, h_out, w_out), y.dtype)
    attrs = {**at, "strides": (sh, sw), "dilations": (dh, dw), "pads": (ph0, pw0, ph1, pw1)}
    if "kernel_shape" in attrs:
        attrs["kernel_shape"] = (kh, kw)
    nodes.append(Node(node.name, Op.CONV, (images, w2, *bias), (out2d,), attrs))
    result = value(f"{y.name}_depth_major", (n, d_out, o, h_out, w_out), y.dtype)
    nodes.append(Node(f"{node.name}/depths", Op.RESHAPE, (out2d,), (result,), {"shape": (n, d_out, o, h_out, w_out)}))
    return result, out2d
