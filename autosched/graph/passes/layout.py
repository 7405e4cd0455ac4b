"""Layout planning: convolutions and the ops between them run in the blocked NCHW[b]c layout.

Per convolution that converts, the register tile becomes a vector of output channels, which
fills the vector whatever the image's width (NCHW vectorizes along rows of 7, 14 or 56).
Converting each convolution alone would pack its input and unpack its output at every layer;
this pass instead keeps tensors blocked from one convolution to the next, through the
elementwise ops (bias, activations, residual adds), pools, channel concats and splits, spatial
reductions, resizes and group norms of whole blocks (`_group_chain`) between them, and
converts back only where a plain-layout op (a reshape, a softmax, the model's outputs) reads a
value. It is TVM's AlterOpLayout idea on this IR.

The block of a tensor depends on its channel count alone (the widest of one, then half a
target vector that divides it), so producers and consumers of a value agree on it without
negotiation; where two blocks meet (a convolution from 24 to 32 channels on AVX-512 reads
blocks of 8, writes blocks of 16) the convolution reads one and writes the other. A
convolution whose input is plain and does not divide into blocks (a model's first layer,
3 channels) reads the plain input directly, as a 1x1 one does an input of fewer than two vectors
of channels (`_narrow_plain`); one whose plain input does (a block's input of 32
or 192 channels, a plain op's output) reads it converted once, and pools of that input read the
same copy. A tensor of one value per channel computed at run time (a squeeze-excitation gate's
scales, out of a Gemm and a Reshape) is converted too, so the tensor it scales stays blocked.
On a Xeon (2 threads, `benchmarks/models.py --baseline`, against reading such inputs plain):
two squeeze-excitation basic blocks of 128 channels at 28x28 1.81x faster, an inception block
on a 192-channel input 1.31x, a dilated 3x3 then a 5x5 stride-2 convolution on a 64-channel
input 1.16x; the ResNeXt block (a 64-channel input) 0.96x and 0.99x in two 100-run A/Bs. Weights stay OIHW constants: the kernels' weight
packing reads only weights, so the build precomputes it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.layout import blocked_groups, blocked_shape, to_blocked
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

#: the narrowest block a grouped convolution is blocked in (a vector of 4 floats: SSE's, NEON's)
MIN_GROUP_BLOCK = 4
#: reductions that keep blocks (ReduceMin only over every axis, `_Planner._reduce`)
_REDUCTIONS = (Op.REDUCE_MEAN, Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN)


def _broadcasts(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether a 4-D operand of `shape` broadcasts to `out` along its batch and spatial axes."""
    return len(shape) == len(out) and all(a in (1, b) for i, (a, b) in enumerate(zip(shape, out)) if i != 1)


def channel_block(channels: int, lanes: int) -> int:
    """The block for a tensor of `channels` channels: a whole vector of `lanes`, else half of
    one; 0 (stay plain) when neither divides the channels."""
    return next((b for b in (lanes, lanes // 2) if b > 1 and channels % b == 0), 0)


def plan_layout(graph: Graph, lanes: int) -> Graph:
    """`graph` with its 2-D convolutions (dense, depthwise, and grouped by whole blocks; float32)
    and the ops between them in blocks of `lanes` (or `lanes/2`; a grouped one down to
    `MIN_GROUP_BLOCK`) channels."""
    return _Planner(graph, lanes).run()


class _Planner:
    def __init__(self, graph: Graph, lanes: int):
        self.graph, self.lanes = graph, lanes
        self.values: dict[str, Value] = dict(graph.values)
        self.constants: dict[str, np.ndarray] = dict(graph.constants)
        self.nodes: list[Node] = []
        self.blocked: dict[str, tuple[str, int]] = {}  # plain value -> (its blocked copy, block)
        self.plain: set[str] = {v.name for v in graph.inputs} | set(graph.constants)
        self.converted: dict[tuple[str, int], str] = {}  # (value, block) -> blocked copy in that block
        self._readers = graph.consumers()

    def run(self) -> Graph:
        chained: set[int] = set()
        for node in self.graph.nodes:
            if id(node) in chained:
                continue
            chain = self._group_chain(node)
            if chain:
                self._grouped(chain)
                chained.update(id(n) for n in chain)
            elif not (self._conv(node) or self._elementwise(node) or self._reduce(node) or self._pool(node)
                      or self._concat(node) or self._split(node) or self._resize(node) or self._slice(node)):
                self._keep(node)
        if not self.blocked:
            return self.graph  # no convolution to block: nothing changes
        for v in self.graph.outputs:
            self._plain(v.name)
        return self.graph.replace(nodes=tuple(self.nodes), values=self.values, constants=self.constants)

    # --- values in either layout ------------------------------------------------------------

    def _block_of(self, name: str) -> int:
        return self.blocked[name][1] if name in self.blocked else 0

    def _plain(self, name: str) -> str:
        """`name` in the plain layout, converting it back from its blocked copy the first time."""
        if name not in self.plain:
            copy, block = self.blocked[name]
            self._add(Node(f"{name}:to_plain", Op.LAYOUT_TRANSFORM, (copy,), (name,),
                           {"src_block": block, "dst_block": 0}))
            self.plain.add(name)
        return name

    def _in_block(self, name: str, block: int) -> str:
        """`name` in blocks of `block`, converting it (once per block) when it is not already."""
        if self._block_of(name) == block:
            return self.blocked[name][0]
        if (name, block) not in self.converted:
            src_block = self._block_of(name)
            src = self.blocked[name][0] if src_block else self._plain(name)
            copy = self._new_value(name, block)
            self._add(Node(f"{name}:to_nchw{block}c", Op.LAYOUT_TRANSFORM, (src,), (copy,),
                           {"src_block": src_block, "dst_block": block}))
            self.converted[(name, block)] = copy
        return self.converted[(name, block)]

    def _new_value(self, name: str, block: int) -> str:
        plain = self.values[name]
        copy = f"{name}@nchw{block}c"
        self.values[copy] = Value(copy, blocked_shape(plain.shape, block), plain.dtype)
        return copy

    def _produce_blocked(self, node: Node, inputs: tuple[str, ...], block: int, op: Op | None = None,
                         attrs: dict[str, Any] | None = None) -> None:
        """Emit `node` computing its (single) output in blocks of `block` from `inputs`."""
        out = node.outputs[0]
        copy = self._new_value(out, block)
        self._add(Node(node.name, op or node.op, inputs, (copy,), dict(node.attrs if attrs is None else attrs)))
        self.blocked[out] = (copy, block)
        self.converted[(out, block)] = copy

    def _produce_parts(self, node: Node, source: str, block: int, attrs: dict[str, Any]) -> None:
        """Emit `node` computing each of its outputs in blocks of `block` from `source`."""
        copies = tuple(self._new_value(out, block) for out in node.outputs)
        self._add(Node(node.name, node.op, (source,), copies, attrs))
        for out, copy in zip(node.outputs, copies):
            self.blocked[out] = (copy, block)
            self.converted[(out, block)] = copy

    def _add(self, node: Node) -> None:
        self.nodes.append(node)

    def _keep(self, node: Node) -> None:
        self._add(Node(node.name, node.op, tuple(self._plain(n) for n in node.inputs), node.outputs, node.attrs))
        self.plain.update(node.outputs)

    # --- the ops that convert ---------------------------------------------------------------

    def _conv(self, node: Node) -> bool:
        if node.op is not Op.CONV or len(node.inputs) < 2 or node.inputs[1] not in self.constants:
            return False
        x, w = self.values[node.inputs[0]], self.values[node.inputs[1]]
        if len(x.shape) != 4 or x.dtype != "float32" or any(name not in self.constants for name in node.inputs[2:]):
            return False
        c, oc, group = x.shape[1], w.shape[0], node.attrs.get("group", 1)
        out_block = channel_block(oc, self.lanes)
        if group > 1 and c // group > 1:
            # groups of whole blocks, in narrower vectors if need be (ResNeXt's groups of 4
            # channels in blocks of 4 on AVX2), rather than plain NCHW between two conversions
            out_block = next((b for b in (self.lanes, self.lanes // 2, self.lanes // 4)
                              if b >= MIN_GROUP_BLOCK and blocked_groups(c, oc, group, b, b)), 0)
        if not out_block:
            return False
        if group == 1:
            # a blocked input is read as it is; a plain one is converted where its channels make
            # blocks (a model's input or a plain op's output of 64 channels), else read plain, as
            # is one a 1x1 convolution reads in fewer than two vectors of channels (`_narrow_plain`)
            in_block = self._block_of(x.name) or (0 if self._narrow_plain(node) else channel_block(c, self.lanes))
            source = self._in_block(x.name, in_block) if in_block else self._plain(x.name)
        elif blocked_groups(c, oc, group, out_block, out_block):  # channel blocks stay aligned in and out
            in_block = out_block
            source = self._in_block(x.name, in_block)
        else:
            return False
        attrs = {**node.attrs, "in_block": in_block, "out_block": out_block}
        self._produce_blocked(node, (source, *node.inputs[1:]), out_block, Op.CONV_NCHWC, attrs)
        return True

    def _narrow_plain(self, conv: Node) -> bool:
        """Whether `conv` is a 1x1 convolution of a plain input of fewer than two vectors of
        channels, which it reads as it is: each output column broadcasts its few input
        elements either way, and the conversion is a pass over the input the convolution hardly
        outlasts. An EfficientNet-style block's 24 -> 144 expansion on 56x56 (AVX-512, 1 thread)
        ran 0.158-0.160 ms reading either layout; the conversion to blocks of 8 cost 0.011 ms,
        the block 1.01-1.02x faster without it (`benchmarks/models.py --baseline`, three runs)."""
        x = self.values[conv.inputs[0]]
        kernel = self.values[conv.inputs[1]].shape[2:]
        return x.name not in self.blocked and tuple(kernel) == (1, 1) and x.shape[1] < 2 * self.lanes

    def _elementwise(self, node: Node) -> bool:
        """An elementwise op with a blocked operand runs blocked when every other operand is
        blocked too, converts to blocks, is a constant broadcast per channel (reshaped here), or
        is one value of rank 0 or 1 (a dynamically quantized model's scales and zero points,
        computed at run time), which broadcasts over the blocks as it is."""
        # BatchNorm indexes its parameters by channel position (and is folded into convolutions)
        if kind_of(node.op) is not OpKind.ELEMWISE or node.op is Op.BATCH_NORM or len(node.outputs) != 1:
            return False
        out = self.values[node.outputs[0]]
        if len(out.shape) != 4 or not any(n in self.blocked for n in node.inputs):
            return False
        # the block an operand already has (a grouped convolution's narrow one), else the usual
        block = next((self.blocked[n][1] for n in node.inputs if n in self.blocked
                      and out.shape[1] % self.blocked[n][1] == 0), channel_block(out.shape[1], self.lanes))
        if not block:
            return False
        inputs = []
        for name in node.inputs:
            shape = (1,) * (4 - len(self.values[name].shape)) + self.values[name].shape
            if name in self.constants and shape[1] in (1, out.shape[1]) and len(self.values[name].shape) <= 4:
                inputs.append(self._blocked_constant(name, shape, block))
            elif len(self.values[name].shape) <= 1 and self.values[name].size == 1:
                inputs.append(self._plain(name))
            elif shape == out.shape or (shape[1] == out.shape[1] and (name in self.blocked or _broadcasts(shape, out.shape))):
                inputs.append(self._in_block(name, block))  # a per-channel tensor too (a squeeze-excitation's scales)
            else:
                return False  # e.g. a non-constant tensor broadcast along channels
        self._produce_blocked(node, tuple(inputs), block)
        return True

    def _blocked_constant(self, name: str, shape: tuple[int, ...], block: int) -> str:
        array = self.constants[name].reshape(shape)
        if shape[1] == 1:  # broadcast along channels: a trailing block axis of 1 keeps broadcasting
            blocked, blocked_name = array[..., None], f"{name}@bcast5d"
        else:
            blocked, blocked_name = to_blocked(array, block), f"{name}@nchw{block}c"
        if blocked_name not in self.constants:
            self.constants[blocked_name] = np.ascontiguousarray(blocked)
            self.values[blocked_name] = Value(blocked_name, tuple(blocked.shape), self.values[name].dtype)
        return blocked_name

    def _reduce(self, node: Node) -> bool:
        """Means, sums and maxima over the spatial axes (global pooling) keep channel blocks. A
        reduction over every axis to one value (the range a dynamically quantized model's
        DynamicQuantizeLinear measures) reads the blocks as they are: the same elements."""
        if node.op not in _REDUCTIONS or node.inputs[0] not in self.blocked:
            return False
        if len(self.values[node.inputs[0]].shape) != 4:
            return False
        copy, block = self.blocked[node.inputs[0]]
        if set(node.attrs["axes"]) == {0, 1, 2, 3} and not node.attrs.get("keepdims", 1):
            self._add(Node(node.name, node.op, (copy,), node.outputs, {**node.attrs, "axes": (0, 1, 2, 3, 4)}))
            self.plain.update(node.outputs)
            return True
        if node.op is Op.REDUCE_MIN or not node.attrs.get("keepdims", 1) or not set(node.attrs["axes"]) <= {2, 3}:
            return False
        self._produce_blocked(node, (copy,), block)
        return True

    def _pool(self, node: Node) -> bool:
        """2-D max and average pools run on the blocks (attribute `block`), the block axis riding along."""
        name = node.inputs[0]
        if kind_of(node.op) is not OpKind.POOL or len(self.values[name].shape) != 4 or len(node.outputs) != 1:
            return False
        if name in self.blocked:
            copy, block = self.blocked[name]
        else:  # a plain input a convolution converts, before or after the pool (an inception block's input)
            block = channel_block(self.values[name].shape[1], self.lanes)
            if not block or ((name, block) not in self.converted and not self._conv_reads(name)):
                return False
            copy = self._in_block(name, block)
        self._produce_blocked(node, (copy,), block, attrs={**node.attrs, "block": block})
        return True

    def _split(self, node: Node) -> bool:
        """A split along channels of a blocked tensor into parts of whole blocks is the same split
        along the channel-block axis (for a batch of one, a view of consecutive bytes: no kernel,
        `aliases.py`), so the parts stay blocked; so is a split along the batch or a spatial axis."""
        if node.op is not Op.SPLIT or node.inputs[0] not in self.blocked:
            return False
        copy, block = self.blocked[node.inputs[0]]
        axis = node.attrs["axis"]
        if len(self.values[node.inputs[0]].shape) != 4 or axis not in (0, 1, 2, 3):
            return False
        if axis == 1 and any(size % block for size in node.attrs["split"]):
            return False
        split = tuple(s // block for s in node.attrs["split"]) if axis == 1 else tuple(node.attrs["split"])
        self._produce_parts(node, copy, block, {**node.attrs, "split": split})
        return True

    def _slice(self, node: Node) -> bool:
        """A slice of a blocked tensor's batch and spatial axes (DeepLab's ASPP convolutions cut
        into regions, `crop_taps`, each reading a window of the image), and of its channels in
        whole blocks (WaveNet's gated units, a convolution's output cut in two), is the same
        slice of the blocked tensor: no conversion to plain and back."""
        if node.op is not Op.SLICE or node.inputs[0] not in self.blocked:
            return False
        shape = self.values[node.inputs[0]].shape
        at = node.attrs
        copy, block = self.blocked[node.inputs[0]]
        start, end, step = at["starts"][1], min(at["ends"][1], shape[1]), at["steps"][1]
        if len(shape) != 4 or step != 1 or start % block or end % block:
            return False
        attrs = {"starts": (*at["starts"][:1], start // block, *at["starts"][2:], 0),
                 "ends": (*at["ends"][:1], end // block, *at["ends"][2:], block),
                 "steps": (*at["steps"][:1], 1, *at["steps"][2:], 1)}
        self._produce_blocked(node, (copy,), block, attrs=attrs)
        return True

    def _group_chain(self, node: Node) -> list[Node] | None:
        """A group norm of a blocked tensor whose groups are whole channel blocks, as the importer
        writes it (`opset.norm`): a Reshape of [N, C, H, W] into [N, G, L], a layer norm over L
        with a uniform scale and bias, reshapes that keep [N, G, L], elementwise ops with
        constants broadcast along L, and a Reshape back to [N, C, H, W], each value read by the
        next alone. On the blocked tensor the same Reshapes are views whose L elements per
        group are the group's, in another order, and nothing in between depends on that order:
        so the chain runs on the blocks, and the ops around it (PoolFormer's pools, per-channel
        scales and residual adds) stay blocked, where the plain chain converted back and forth."""
        if node.op is not Op.RESHAPE or node.inputs[0] not in self.blocked:
            return None
        x, y = self.values[node.inputs[0]], self.values[node.outputs[0]]
        block = self.blocked[x.name][1]
        if len(x.shape) != 4 or len(y.shape) != 3 or y.shape[0] != x.shape[0] or x.shape[1] % y.shape[1] \
                or (x.shape[1] // y.shape[1]) % block:
            return None
        outputs = {v.name for v in self.graph.outputs}
        chain, value = [node], y.name
        while True:
            after = self._readers.get(value, [])
            if len(after) != 1 or value in outputs:
                return None
            step = after[0]
            if step.op is Op.RESHAPE and self.values[step.outputs[0]].shape == x.shape:
                return chain + [step]
            if not self._keeps_groups(step, value, y.shape):
                return None
            chain.append(step)
            value = step.outputs[0]

    def _keeps_groups(self, node: Node, value: str, shape: tuple[int, ...]) -> bool:
        """Whether `node`, reading `value` of [N, G, L], gives each element a result that does
        not depend on where in its group it sits."""
        if len(node.outputs) != 1 or self.values[node.outputs[0]].shape != shape:
            return False
        others = [n for n in node.inputs if n != value]
        if node.op is Op.RESHAPE:
            return node.inputs[0] == value
        if node.op is Op.LAYER_NORM:
            return node.inputs[0] == value and node.attrs["axis"] in (2, -1) and all(
                n in self.constants and np.all(self.constants[n] == self.constants[n].reshape(-1)[0]) for n in others)
        return kind_of(node.op) is OpKind.ELEMWISE and node.op is not Op.BATCH_NORM and all(
            n in self.constants and (self.values[n].shape[-1:] in ((), (1,))) for n in others)

    def _grouped(self, chain: list[Node]) -> None:
        """Emit a `_group_chain` on the blocked tensor: its values renamed, its last Reshape
        producing the blocked result."""
        first, last = chain[0], chain[-1]
        copy, block = self.blocked[first.inputs[0]]
        renamed: dict[str, str] = {}
        for node in chain[:-1]:
            source = first.inputs[0] if node is first else None
            inputs = tuple(copy if n == source else renamed.get(n, n) for n in node.inputs)
            out = node.outputs[0]
            renamed[out] = f"{out}@grouped{block}c"
            self.values[renamed[out]] = Value(renamed[out], self.values[out].shape, self.values[out].dtype)
            self._add(Node(node.name, node.op, inputs, (renamed[out],), node.attrs))
        shape = blocked_shape(self.values[last.outputs[0]].shape, block)
        self._produce_blocked(last, (renamed[last.inputs[0]],), block, attrs={**last.attrs, "shape": shape})

    def _only_output(self, name: str) -> bool:
        """Whether `name` is a graph output that no node reads."""
        return (any(v.name == name for v in self.graph.outputs)
                and not any(name in node.inputs for node in self.graph.nodes))

    def _conv_reads(self, name: str) -> bool:
        """Whether a convolution with constant weights reads `name` (and so converts it)."""
        return any(node.op is Op.CONV and node.inputs[0] == name and node.inputs[1] in self.constants
                   for node in self.graph.nodes)

    def _resize(self, node: Node) -> bool:
        """A Resize of the spatial axes of a blocked tensor (an FPN's or a U-Net's upsampling)
        reads the same tables on the blocks, the block axis riding along. An upsampling whose
        result is only a graph output (a YOLO neck's last one, a segmentation head's) runs plain:
        its input is converted instead of its result, which is 4x larger for a 2x upsampling.
        A CSP neck's 128-channel 40 -> 80 upsampling spent 0.24-0.27 ms converting its result
        to plain, 0.02 in the Resize itself (EPYC Zen 5, 2 threads, `bench --kernels`)."""
        if node.op is not Op.RESIZE or node.inputs[0] not in self.blocked:
            return False
        out = node.outputs[0]
        if self._only_output(out) and self.values[out].size > self.values[node.inputs[0]].size:
            return False
        if len(self.values[node.inputs[0]].shape) != 4 or not set(node.attrs["axes"]) <= {2, 3}:
            return False
        copy, block = self.blocked[node.inputs[0]]
        self._produce_blocked(node, (copy, *node.inputs[1:]), block)
        return True

    def _concat(self, node: Node) -> bool:
        """A concat along channels of tensors that each divide into the result's blocks is the
        same concat of the blocked tensors along the channel-block axis; along the batch or a
        spatial axis (the regions of a convolution `crop_taps` cut), the same concat of the
        blocked tensors along that axis."""
        if node.op is not Op.CONCAT or node.attrs["axis"] not in (0, 1, 2, 3):
            return False
        if not any(n in self.blocked for n in node.inputs):
            return False
        out = self.values[node.outputs[0]]
        block = channel_block(out.shape[1], self.lanes)
        if len(out.shape) != 4 or not block or any(self.values[n].shape[1] % block for n in node.inputs):
            return False
        self._produce_blocked(node, tuple(self._in_block(n, block) for n in node.inputs), block)
        return True
