"""RNN, GRU and LSTM, unrolled over their static sequence at import.

Shapes are static, so a recurrence of T steps is T copies of its cell: the input's products
for every step are one MatMul ([T·batch, input] by the gates' weights, biases added), and each
step is a MatMul of the previous hidden state by the recurrent weights, then the gates'
elementwise math, which fuses into that MatMul's epilogue where it can. The T step MatMuls share
one task (same shapes), so tuning one tunes all. Weights, biases and peepholes must be
constants; the initial states may be inputs. Gate order and equations are ONNX's.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Op

#: activation name -> graph op, for the ones recurrent cells use
_ACTIVATIONS = {"Sigmoid": Op.SIGMOID, "Tanh": Op.TANH, "Relu": Op.RELU}


@dataclass
class _Direction:
    """One direction's emitter: its weights as constants, steps named after the node."""

    imp: Importer
    node: OnnxNode
    index: int
    hidden: int
    activations: list[Op]
    recurrent: np.ndarray  # R[d]: [gates·H, H]
    recurrent_bias: np.ndarray  # Rb[d]: [gates·H]

    def step(self, label: str, op: Op, inputs: Sequence[str], attrs: dict[str, Any] | None = None) -> str:
        return self.imp.emit_step(self.node, f"d{self.index}/{label}", op, list(inputs), attrs or {})

    def constant(self, label: str, array: np.ndarray) -> str:
        name = f"{self.node.outputs[0] or self.node.name}:d{self.index}/{label}"
        if name not in self.imp.constants:
            self.imp.add_constant(name, np.ascontiguousarray(array))
        return name

    def activate(self, label: str, which: int, x: str) -> str:
        clip = self.node.attr("clip")
        if clip is not None:
            x = self.step(f"{label}/clip", Op.CLIP, [x], {"min": -float(clip), "max": float(clip)})
        return self.step(label, self.activations[which], [x])

    def split(self, label: str, x: str, count: int) -> list[str]:
        parts = [f"{self.node.outputs[0] or self.node.name}:d{self.index}/{label}/{k}" for k in range(count)]
        self.imp.emit(replace(self.node, name=f"{self.node.name}/d{self.index}/{label}"), Op.SPLIT, [x], parts,
                      {"axis": 1, "split": (self.hidden,) * count})
        return parts

    def times_recurrent(self, label: str, h: str, gates: slice) -> str:
        """h by the recurrent weights of `gates` (rows of R, as gate·H slices)."""
        rows = slice(gates.start * self.hidden, gates.stop * self.hidden)
        return self.step(label, Op.MATMUL, [h, self.constant(f"r_t{gates.start}_{gates.stop}", self.recurrent[rows].T)])


#: a cell: (direction, step label, the input's gate pre-activations [batch, gates·H] with
#: the biases the cell does not apply itself, previous states) -> new states, h first
CellFn = Callable[[_Direction, str, str, list[str]], list[str]]


def _rnn_cell(u: _Direction, t: str, x_part: str, states: list[str]) -> list[str]:
    return [u.activate(f"{t}/h", 0, u.step(f"{t}/pre", Op.ADD, [x_part, u.times_recurrent(f"{t}/h_r", states[0], slice(0, 1))]))]


def _lstm_cell(u: _Direction, t: str, x_part: str, states: list[str]) -> list[str]:
    h_prev, c_prev = states
    pre = u.step(f"{t}/pre", Op.ADD, [x_part, u.times_recurrent(f"{t}/h_r", h_prev, slice(0, 4))])
    peep = u.node.const(7)
    if peep is None and u.activations == [Op.SIGMOID, Op.TANH, Op.TANH]:
        return _lstm_cell_activated_at_once(u, t, pre, c_prev)
    i, o, f, c = u.split(f"{t}/gates", pre, 4)
    p = peep[u.index] if peep is not None else None  # P: [dirs, 3H], input, output, forget
    if p is not None:
        i = u.step(f"{t}/i_peep", Op.ADD, [i, u.step(f"{t}/i_pc", Op.MUL, [c_prev, u.constant("p_i", p[:u.hidden])])])
        f = u.step(f"{t}/f_peep", Op.ADD, [f, u.step(f"{t}/f_pc", Op.MUL, [c_prev, u.constant("p_f", p[2 * u.hidden:])])])
    i, f = u.activate(f"{t}/i", 0, i), u.activate(f"{t}/f", 0, f)
    cell = u.step(f"{t}/c", Op.ADD, [u.step(f"{t}/fc", Op.MUL, [f, c_prev]),
                                     u.step(f"{t}/ic", Op.MUL, [i, u.activate(f"{t}/g", 1, c)])])
    if p is not None:
        o = u.step(f"{t}/o_peep", Op.ADD, [o, u.step(f"{t}/o_pc", Op.MUL, [cell, u.constant("p_o", p[u.hidden:2 * u.hidden])])])
    return [u.step(f"{t}/h", Op.MUL, [u.activate(f"{t}/o", 0, o), u.activate(f"{t}/hc", 2, cell)]), cell]


def _lstm_cell_activated_at_once(u: _Direction, t: str, pre: str, c_prev: str) -> list[str]:
    """The default activations of all four gates as one elementwise chain over [batch, 4H],
    which fuses into the step's MatMul: sigmoid for i, o, f, and tanh(x) = 2·sigmoid(2x) - 1 for
    the candidate, as per-column constants (a, b, s: a·sigmoid(s·x) + b). A step is then four
    kernels (product with activations, split, cell, hidden) instead of seven; near 0 the
    candidate's tanh is exact to about 1e-7 absolute, not relative."""
    h = u.hidden
    dtype = u.imp.value(pre).dtype
    column = {name: u.constant(f"act_{name}", np.concatenate([np.full(3 * h, one), np.full(h, cand)]).astype(dtype))
              for name, one, cand in (("s", 1.0, 2.0), ("a", 1.0, 2.0), ("b", 0.0, -1.0))}
    if u.node.attr("clip") is not None:
        clip = float(u.node.attr("clip"))
        pre = u.step(f"{t}/clip", Op.CLIP, [pre], {"min": -clip, "max": clip})
    act = u.step(f"{t}/sig", Op.SIGMOID, [u.step(f"{t}/scaled", Op.MUL, [pre, column["s"]])])
    act = u.step(f"{t}/act", Op.ADD, [u.step(f"{t}/stretched", Op.MUL, [act, column["a"]]), column["b"]])
    i, o, f, g = u.split(f"{t}/gates", act, 4)
    cell = u.step(f"{t}/c", Op.ADD, [u.step(f"{t}/fc", Op.MUL, [f, c_prev]), u.step(f"{t}/ig", Op.MUL, [i, g])])
    return [u.step(f"{t}/h", Op.MUL, [o, u.step(f"{t}/hc", Op.TANH, [cell])]), cell]


def _gru_cell(u: _Direction, t: str, x_part: str, states: list[str]) -> list[str]:
    """z and r from one product of h; the candidate's recurrent product after the reset gate
    (linear_before_reset=0: of r·h) or before it (1: r·(h R_h + Rb_h)). x_part carries Wb for
    all three gates and Rb for z and r."""
    h_prev = states[0]
    x_z, x_r, x_h = u.split(f"{t}/x_gates", x_part, 3)
    z_r = u.split(f"{t}/zr", u.times_recurrent(f"{t}/h_zr", h_prev, slice(0, 2)), 2)
    z = u.activate(f"{t}/z", 0, u.step(f"{t}/z_pre", Op.ADD, [x_z, z_r[0]]))
    r = u.activate(f"{t}/r", 0, u.step(f"{t}/r_pre", Op.ADD, [x_r, z_r[1]]))
    rb_h = u.constant("rb_h", u.recurrent_bias[2 * u.hidden:])
    if int(u.node.attr("linear_before_reset", 0)):
        product = u.step(f"{t}/h_rh_b", Op.ADD, [u.times_recurrent(f"{t}/h_rh", h_prev, slice(2, 3)), rb_h])
        recurrent = u.step(f"{t}/reset", Op.MUL, [r, product])
    else:
        reset = u.step(f"{t}/reset", Op.MUL, [r, h_prev])
        recurrent = u.step(f"{t}/rh_b", Op.ADD, [u.times_recurrent(f"{t}/rh", reset, slice(2, 3)), rb_h])
    candidate = u.activate(f"{t}/candidate", 1, u.step(f"{t}/h_pre", Op.ADD, [x_h, recurrent]))
    # h = (1 - z)·candidate + z·h_prev = candidate + z·(h_prev - candidate)
    change = u.step(f"{t}/keep", Op.MUL, [z, u.step(f"{t}/delta", Op.SUB, [h_prev, candidate])])
    return [u.step(f"{t}/h", Op.ADD, [candidate, change])]


@dataclass(frozen=True)
class _Kind:
    gates: int
    cell: CellFn
    activations: tuple[str, ...]
    states: int  # 1: h; 2: h and c
    #: which gates' recurrent bias is added with the input's product (GRU's candidate: none)
    rb_with_x: int


def _unroll(kind: _Kind) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        x = imp.value(node.inputs[0])
        if len(x.shape) != 3:
            raise node.error(f"X must be 3-D, not {list(x.shape)}")
        batch_first = int(node.attr("layout", 0)) == 1
        steps, batch, width = (x.shape[1], x.shape[0], x.shape[2]) if batch_first else x.shape
        hidden, gh = int(node.attr("hidden_size", 0)), kind.gates * int(node.attr("hidden_size", 0))
        weights, recurrent, bias, lens = node.const(1), node.const(2), node.const(3), node.const(4)
        if weights is None or recurrent is None or hidden < 1:
            raise node.error("W and R must be constants and hidden_size positive")
        if node.has_input(4) and (lens is None or np.any(lens != steps)):
            raise node.error("sequence_lens shorter than the sequence (or given at run time) is not supported")
        if int(node.attr("input_forget", 0)):
            raise node.error("input_forget is not supported")
        direction = node.attr("direction", "forward")
        reverses = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
        if reverses is None:
            raise node.error(f"direction must be forward, reverse or bidirectional, not {direction!r}")
        names = node.attr("activations") or list(kind.activations) * len(reverses)
        unknown = sorted({a for a in names if a not in _ACTIVATIONS})
        if unknown:
            raise node.error(f"activations {unknown} are not supported (only {sorted(_ACTIVATIONS)})")
        if bias is None:
            bias = np.zeros((len(reverses), 2 * gh), x.dtype)
        source = node.inputs[0]
        if batch_first:
            source = imp.emit_step(node, "time_major", Op.TRANSPOSE, [source], {"perm": (1, 0, 2)})
        rows = imp.emit_step(node, "rows", Op.RESHAPE, [source], {"shape": (steps * batch, width)})
        ys: list[list[str]] = []
        finals: list[list[str]] = []
        per = len(kind.activations)
        for d, reverse in enumerate(reverses):
            u = _Direction(imp, node, d, hidden, [_ACTIVATIONS[a] for a in names[d * per:(d + 1) * per]],
                           recurrent[d], bias[d, gh:])
            x_bias = bias[d, :gh] + np.concatenate([bias[d, gh:gh + kind.rb_with_x * hidden],
                                                    np.zeros(gh - kind.rb_with_x * hidden, x.dtype)])
            projected = u.step("x_w", Op.MATMUL, [rows, u.constant("w_t", weights[d].T)])
            projected = u.step("x_w_b", Op.ADD, [projected, u.constant("x_bias", x_bias.astype(x.dtype))])
            projected = u.step("x_w_steps", Op.RESHAPE, [projected], {"shape": (steps, batch, gh)})
            states = []
            for k, index in enumerate((5, 6)[:kind.states]):
                if not node.has_input(index):
                    states.append(u.constant(f"state{k}", np.zeros((batch, hidden), x.dtype)))
                    continue
                given = node.inputs[index]
                if batch_first:  # [batch, dirs, hidden]
                    given = u.step(f"state{k}/time_major", Op.TRANSPOSE, [given], {"perm": (1, 0, 2)})
                given = u.step(f"state{k}/slice", Op.SLICE, [given], {
                    "starts": (d, 0, 0), "ends": (d + 1, batch, hidden), "steps": (1, 1, 1)})
                states.append(u.step(f"state{k}", Op.RESHAPE, [given], {"shape": (batch, hidden)}))
            # every step's slice of the products by one Split (one kernel, not one per step)
            per_step = [f"{node.outputs[0] or node.name}:d{d}/x_t{t}" for t in range(steps)]
            imp.emit(replace(node, name=f"{node.name}/d{d}/x_steps"), Op.SPLIT, [projected], per_step,
                     {"axis": 0, "split": (1,) * steps})
            hs: list[str] = []
            for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
                x_t = u.step(f"t{t}/x2d", Op.RESHAPE, [per_step[t]], {"shape": (batch, gh)})
                states = kind.cell(u, f"t{t}", x_t, states)
                hs.append(states[0])
            if reverse:
                hs.reverse()
            ys.append([u.step(f"y{t}", Op.RESHAPE, [h], {"shape": (1, 1, batch, hidden)}) for t, h in enumerate(hs)])
            finals.append([u.step(f"final{k}", Op.RESHAPE, [s], {"shape": (1, batch, hidden)}) for k, s in enumerate(states)])
        _emit_outputs(imp, node, ys, finals, batch_first)

    return Converter(convert, constant_inputs=(1, 2, 3, 4, 7))


def _emit_outputs(imp: Importer, node: OnnxNode, ys: list[list[str]], finals: list[list[str]], batch_first: bool) -> None:
    """Y [T, dirs, batch, H] (batch first: [batch, T, dirs, H]) and the final states
    [dirs, batch, H] ([batch, dirs, H]), each only where the model reads it."""
    wanted = node.used_outputs()
    if 0 in wanted:
        per_step = [imp.emit_step(node, f"y_t{t}", Op.CONCAT, [y[t] for y in ys], {"axis": 1}) if len(ys) > 1 else ys[0][t]
                    for t in range(len(ys[0]))]
        y = imp.emit_step(node, "y", Op.CONCAT, per_step, {"axis": 0})
        if batch_first:
            y = imp.emit_step(node, "y_batch_first", Op.TRANSPOSE, [y], {"perm": (2, 0, 1, 3)})
        imp.emit(node, Op.IDENTITY, [y], node.outputs[:1], {})
    for k in range(len(finals[0])):
        if k + 1 in wanted:
            final = [f[k] for f in finals]
            if batch_first:
                final = [imp.emit_step(node, f"final{k}/batch_first{d}", Op.TRANSPOSE, [f], {"perm": (1, 0, 2)})
                         for d, f in enumerate(final)]
            imp.emit(node, Op.CONCAT, final, [node.outputs[k + 1]], {"axis": 1 if batch_first else 0})


IMPORTERS: dict[str, Converter] = {
    "RNN": _unroll(_Kind(1, _rnn_cell, ("Tanh",), 1, rb_with_x=1)),
    "GRU": _unroll(_Kind(3, _gru_cell, ("Sigmoid", "Tanh"), 1, rb_with_x=2)),
    "LSTM": _unroll(_Kind(4, _lstm_cell, ("Sigmoid", "Tanh", "Tanh"), 2, rb_with_x=4)),
}
