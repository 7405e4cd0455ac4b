"""The attention ops of opset 23, imported as the graph ops they are made of: Attention
(scaled dot-product attention with masks, causal masking, grouped-query heads, a key/value
cache and a soft cap) and RotaryEmbedding (rotary position embeddings, halves or interleaved
pairs). Exporters of decoder models emit them since opset 23; written as compositions, the
matrix products become ordinary MatMul tasks and the rest fuses into their epilogues and the
Softmax, as when a model spells attention out. Semantics are ONNX's reference implementation's.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Op


@dataclass
class _Steps:
    """Emits one ONNX node's steps and constants, named after it."""

    imp: Importer
    node: OnnxNode
    dtype: str

    def __call__(self, label: str, op: Op, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        return self.imp.emit_step(self.node, label, op, list(inputs), attrs or {})

    def constant(self, label: str, array: Any, dtype: str | None = None) -> str:
        name = f"{self.node.outputs[0] or self.node.name}:{label}"
        self.imp.add_constant(name, np.asarray(array, dtype=dtype or self.dtype))
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        return self.imp.value(name).shape

    def last_axis(self, label: str, x: str, start: int, stop: int, step: int = 1) -> str:
        """x[..., start:stop:step]."""
        shape = self.shape(x)
        return self(label, Op.SLICE, [x], {"starts": (0,) * (len(shape) - 1) + (start,),
                                           "ends": shape[:-1] + (stop,), "steps": (1,) * (len(shape) - 1) + (step,)})

    def output(self, index: int, op: Op, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> None:
        """The node's output `index` as the result of one more step."""
        self.imp.emit(self.node, op, list(inputs), [self.node.outputs[index]], attrs or {})


def _heads_first(s: _Steps, label: str, x: str, heads: int) -> str:
    """[batch, seq, heads·size] as [batch, heads, seq, size]."""
    batch, seq, hidden = s.shape(x)
    if hidden % heads:
        raise s.node.error(f"'{x}' has {hidden} features, which {heads} heads do not divide")
    split = s(f"{label}/heads", Op.RESHAPE, [x], {"shape": (batch, seq, heads, hidden // heads)})
    return s(f"{label}/heads_first", Op.TRANSPOSE, [split], {"perm": (0, 2, 1, 3)})


def _import_attention(imp: Importer, node: OnnxNode) -> None:
    q, k, v = node.inputs[:3]
    s = _Steps(imp, node, imp.value(q).dtype)
    rank = len(s.shape(q))
    if rank not in (3, 4) or {len(s.shape(k)), len(s.shape(v))} != {rank}:
        raise node.error(f"Q, K and V must all be 3-D or all 4-D, not {[list(s.shape(n)) for n in (q, k, v)]}")
    if rank == 3:
        q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if not q_heads or not kv_heads:
            raise node.error("3-D inputs need the q_num_heads and kv_num_heads attributes")
        q, k, v = (_heads_first(s, label, x, h) for label, x, h in (("q", q, q_heads), ("k", k, kv_heads),
                                                                    ("v", v, kv_heads)))
    past = 0
    if node.has_input(4) != node.has_input(5):
        raise node.error("past_key and past_value come together")
    if node.has_input(4):
        past = s.shape(node.inputs[4])[2]
        k = s("present_key", Op.CONCAT, [node.inputs[4], k], {"axis": 2})
        v = s("present_value", Op.CONCAT, [node.inputs[5], v], {"axis": 2})
    for index, present in ((1, k), (2, v)):
        if index in node.used_outputs():
            s.output(index, Op.IDENTITY, [present])
    batch, q_heads, length, size = s.shape(q)
    kv_heads, keys = s.shape(k)[1], s.shape(k)[2]
    if q_heads % kv_heads:
        raise node.error(f"{q_heads} query heads are no multiple of {kv_heads} key/value heads")
    reps = q_heads // kv_heads  # grouped-query attention: each K/V head serves `reps` query heads
    # Without a bias (no mask; a causal frontier that admits every key: a decode step), a K/V
    # head's query heads are stacked as one matrix, [batch, kv_heads, reps·length, size], and K and
    # V are read once per group. With one, K and V are repeated per query head instead: the bias
    # repeated to the stacked rows cost more than the copies (a 512-token prefill ran 0.88-0.95x).
    stacked = reps > 1 and not _needs_bias(node, keys, length, past)
    if stacked:
        q = s("q/stacked", Op.RESHAPE, [q], {"shape": (batch, kv_heads, reps * length, size)})
    elif reps > 1:
        k, v = (s(f"{label}/per_query_head", Op.RESHAPE,
                  [s(f"{label}/repeated", Op.EXPAND, [s(f"{label}/grouped", Op.RESHAPE, [x], {"shape": (
                      batch, kv_heads, 1, keys, s.shape(x)[3])})], {"shape": (batch, kv_heads, reps, keys, s.shape(x)[3])})],
                  {"shape": (batch, q_heads, keys, s.shape(x)[3])}) for label, x in (("k", k), ("v", v)))

    def per_query_head(label: str, x: str) -> str:
        rows, n = s.shape(x)[2:]
        return s(label, Op.RESHAPE, [x], {"shape": (batch, q_heads, rows // reps, n)}) if stacked else x

    scale = node.attr("scale")
    scale = 1.0 / np.sqrt(size) if scale is None else float(scale)
    scores = s("scores", Op.MATMUL, [q, s("keys_t", Op.TRANSPOSE, [k], {"perm": (0, 1, 3, 2)})])
    scores = s("scaled", Op.MUL, [scores, s.constant("scale", scale)])
    softcap = float(node.attr("softcap", 0.0))
    if softcap > 0:
        cap = s.constant("softcap", softcap)
        scores = s("capped", Op.MUL, [s("capped/tanh", Op.TANH, [s("capped/in", Op.DIV, [scores, cap])]), cap])
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise node.error(f"qk_matmul_output_mode {mode} is not one of 0-3")
    wants_qk = 3 in node.used_outputs()
    if wants_qk and mode in (0, 1):
        s.output(3, Op.IDENTITY, [per_query_head("qk_scores", scores)])
    bias = _bias(s, keys, length, past)
    if bias is not None:
        scores = s("masked", Op.ADD, [scores, bias])
    if wants_qk and mode == 2:
        s.output(3, Op.IDENTITY, [per_query_head("qk_masked", scores)])
    probs = s("probs", Op.SOFTMAX, [scores], {"axis": 3})
    if bias is not None and _may_mask_whole_rows(s, bias):  # such a row attends nothing: 0, not NaN
        blocked = s("row_blocked", Op.EQUAL, [s("row_max", Op.REDUCE_MAX, [bias], {"axes": (len(s.shape(bias)) - 1,),
                                                                                  "keepdims": 1}),
                                             s.constant("neg_inf", -np.inf)])
        probs = s("probs_guarded", Op.WHERE, [blocked, s.constant("zero", 0.0), probs])
    if wants_qk and mode == 3:
        s.output(3, Op.IDENTITY, [per_query_head("qk_probs", probs)])
    if rank == 4 and not stacked:
        s.output(0, Op.MATMUL, [probs, v])
        return
    context = per_query_head("context_per_head", s("context", Op.MATMUL, [probs, v]))
    if rank == 4:
        s.output(0, Op.IDENTITY, [context])
        return
    y = s("attended", Op.TRANSPOSE, [context], {"perm": (0, 2, 1, 3)})
    s.output(0, Op.RESHAPE, [y], {"shape": (batch, length, q_heads * s.shape(v)[3])})


def _admitted(node: OnnxNode, keys: int, length: int, past: int) -> np.ndarray:
    """Which keys each query may attend by the causal frontier and the sliding window, given
    the past's length (no static cache): [length, keys] booleans."""
    causal = bool(node.attr("is_causal", 0))
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    diff = np.arange(length)[:, None] - np.arange(keys)[None, :] + past  # offset + i - j
    allowed = (diff >= 0) | (not causal)
    allowed &= (diff <= left) | (left < 0)
    allowed &= (-diff <= right) | (right < 0)
    return allowed


def _needs_bias(node: OnnxNode, keys: int, length: int, past: int) -> bool:
    """Whether `_bias` will add anything: a mask, a static cache, or a frontier that excludes a key."""
    return node.has_input(3) or node.has_input(6) or not _admitted(node, keys, length, past).all()


def _bias(s: _Steps, keys: int, length: int, past: int) -> str | None:
    """The additive bias of the scores, 0 where a query may attend a key and -inf where not, or
    None: the mask (True or 0 where it may), the causal frontier (a query at i attends keys
    j <= i + offset), the sliding window (offset + i - j within left and right), the padding of
    a static cache (keys j < nonpad_kv_seqlen[b]). The offset is the past's length, or with a
    static cache nonpad_kv_seqlen[b] - length, known only at run time."""
    node = s.node
    mask = node.inputs[3] if node.has_input(3) else None
    if mask is not None:
        if np.dtype(s.imp.value(mask).dtype) == np.bool_:
            mask = s("mask_bias", Op.WHERE, [mask, s.constant("attend", 0.0), s.constant("masked_out", -np.inf)])
        covered = s.shape(mask)[-1]
        if covered > keys:
            raise node.error(f"attn_mask '{node.inputs[3]}' covers {covered} keys, more than the {keys} there are")
        if covered < keys:  # the keys beyond the mask are masked out
            rank = len(s.shape(mask))
            mask = s("mask_padded", Op.PAD, [mask], {"pads": (0,) * (2 * rank - 1) + (keys - covered,),
                                                     "mode": "constant", "value": -np.inf})
    causal = bool(node.attr("is_causal", 0))
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    static_cache = node.has_input(6)
    if not (causal or left >= 0 or right >= 0 or static_cache):
        return mask
    frontier = np.arange(length)[:, None] - np.arange(keys)[None, :]  # i - j
    if not static_cache:
        allowed = _admitted(node, keys, length, past)
        if allowed.all():  # every key admitted (a decode step's causal frontier): no bias
            return mask
        limits = s.constant("frontier_bias", np.where(allowed, 0.0, -np.inf))
    else:
        if past:
            raise node.error("nonpad_kv_seqlen and past_key do not come together")
        valid = s("valid_keys", Op.RESHAPE, [node.inputs[6]], {"shape": (s.shape(node.inputs[6])[0], 1, 1, 1)})
        offset = s("offset", Op.SUB, [valid, s.constant("length", length, "int64")])
        gap = s("diff", Op.ADD, [s.constant("i_minus_j", frontier, "int64"), offset])
        admitted = s("unpadded", Op.LESS, [s.constant("key_index", np.arange(keys), "int64"), valid])
        for label, op, bound, wanted in (("causal", Op.GREATER_OR_EQUAL, 0, causal),
                                         ("left", Op.LESS_OR_EQUAL, left, left >= 0),
                                         ("right", Op.GREATER_OR_EQUAL, -right, right >= 0)):
            if wanted:
                within = s(f"{label}_frontier", op, [gap, s.constant(f"{label}_bound", bound, "int64")])
                admitted = s(f"allowed_{label}", Op.AND, [admitted, within])
        limits = s("frontier_bias", Op.WHERE, [admitted, s.constant("attend", 0.0), s.constant("masked_out", -np.inf)])
    return limits if mask is None else s("bias", Op.ADD, [mask, limits])


def _may_mask_whole_rows(s: _Steps, bias: str) -> bool:
    """Whether some query row of the bias may be all -inf: unknown for a run-time mask."""
    if bias not in s.imp.constants:
        return True
    return bool(np.isneginf(s.imp.constants[bias]).all(axis=-1).any())


def _import_rotary_embedding(imp: Importer, node: OnnxNode) -> None:
    x, cos, sin = node.inputs[:3]
    s = _Steps(imp, node, imp.value(x).dtype)
    shape = s.shape(x)
    if len(shape) == 3:
        heads = node.attr("num_heads")
        if not heads:
            raise node.error("a 3-D input needs the num_heads attribute")
        if shape[2] % heads:
            raise node.error(f"{shape[2]} features do not divide into {heads} heads")
        work = s("heads", Op.RESHAPE, [x], {"shape": (shape[0], shape[1], heads, shape[2] // heads)})
        per_position = (shape[0], shape[1], 1)  # cos/sin [batch, seq, half] over [batch, seq, heads, size]
    elif len(shape) == 4:
        work, per_position = x, (shape[0], 1, shape[2])  # [batch, heads, seq, size]
    else:
        raise node.error(f"the input must be 3-D or 4-D, not {list(shape)}")
    size = s.shape(work)[3]
    rotated = int(node.attr("rotary_embedding_dim", 0)) or size
    if rotated % 2 or rotated > size:
        raise node.error(f"rotary_embedding_dim {rotated} must be even and at most the head size {size}")
    half = rotated // 2
    if node.has_input(3):  # caches by position: gathered per token
        cos, sin = (s(f"{label}/by_position", Op.GATHER, [cache, node.inputs[3]], {"axis": 0})
                    for label, cache in (("cos", cos), ("sin", sin)))
    for cache in (cos, sin):
        if s.shape(cache) != (shape[0], shape[1] if len(shape) == 3 else shape[2], half):
            raise node.error(f"cos/sin '{cache}' has shape {list(s.shape(cache))}, expected "
                             f"[batch, sequence, {half}]")
    cos, sin = (s(f"{label}/broadcast", Op.RESHAPE, [cache], {"shape": per_position + (half,)})
                for label, cache in (("cos", cos), ("sin", sin)))
    interleaved = bool(node.attr("interleaved", 0))
    x1 = s.last_axis("x1", work, 0, rotated, 2) if interleaved else s.last_axis("x1", work, 0, half)
    x2 = s.last_axis("x2", work, 1, rotated, 2) if interleaved else s.last_axis("x2", work, half, rotated)
    real = s("real", Op.SUB, [s("cos_x1", Op.MUL, [cos, x1]), s("sin_x2", Op.MUL, [sin, x2])])
    imag = s("imag", Op.ADD, [s("sin_x1", Op.MUL, [sin, x1]), s("cos_x2", Op.MUL, [cos, x2])])
    if interleaved:  # pairs back in place: [..., half, 2] read as [..., rotated]
        pairs = [s(f"{label}/pair", Op.RESHAPE, [part], {"shape": s.shape(part) + (1,)})
                 for label, part in (("real", real), ("imag", imag))]
        out = s("rotated", Op.RESHAPE, [s("pairs", Op.CONCAT, pairs, {"axis": 4})],
                {"shape": s.shape(real)[:3] + (rotated,)})
    else:
        out = s("rotated", Op.CONCAT, [real, imag], {"axis": 3})
    parts = [out] + ([s.last_axis("passed", work, rotated, size)] if rotated < size else [])
    if len(shape) == 3:
        joined = s("joined", Op.CONCAT, parts, {"axis": 3}) if len(parts) > 1 else out
        s.output(0, Op.RESHAPE, [joined], {"shape": shape})
    elif len(parts) > 1:
        s.output(0, Op.CONCAT, parts, {"axis": 3})
    else:
        s.output(0, Op.IDENTITY, [out])


IMPORTERS: dict[str, Converter] = {
    "Attention": Converter(_import_attention),
    "RotaryEmbedding": Converter(_import_rotary_embedding),
}
