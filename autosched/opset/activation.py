"""Activations: the unary nonlinearities of CNNs and transformers, and PRelu.

Each is one scalar expression, so each fuses into an anchor's epilogue like any elementwise op.
References compute in float64 and round once to the operand's dtype, so the compiled kernels'
float32 error is measured against the exact function, not against another float32 formula.
Where ONNX's formula overflows (Softplus's log(exp(x) + 1) at x > 88), the kernel uses a form
that does not: max(x, 0) + log(1 + exp(-|x|)).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from autosched import te
from autosched.graph.ir import Op
from autosched.ops import elementwise as ew
from autosched.opset.algebra import unary
from autosched.opset.elementwise import binary_op, const_like, elementwise, erf_reference, unary_op
from autosched.opset.record import OpDef, ScalarFn, direct
from autosched.te import Expr

#: SELU's constants as ONNX states them (the float32 values of Klambauer et al.'s)
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def activation(op: Op, scalar: ScalarFn, exact: Callable[[np.ndarray, Mapping[str, Any]], np.ndarray],
               **defaults: object) -> OpDef:
    """A unary activation: `exact(x in float64, attrs)` is its reference, `defaults` its
    attributes' ONNX defaults."""

    def reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        with np.errstate(over="ignore"):
            return [np.asarray(exact(args[0].astype(np.float64), {**defaults, **attrs})).astype(args[0].dtype)]

    def expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:  # nodes made by passes may omit defaults
        return scalar(a, {**defaults, **at})

    return elementwise(op, expr, reference, {op.value: direct(op, **defaults)})


def _c(value: float, like: Expr) -> Expr:
    return const_like(value, like)


def _zero(x: Expr) -> Expr:
    return _c(0.0, x)


def _softplus_expr(x: Expr) -> Expr:
    """log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)."""
    return te.max(x, _zero(x)) + te.log(_c(1.0, x) + te.exp(-te.abs(x)))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, 0.0)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gelu(x: np.ndarray, at: Mapping[str, Any]) -> np.ndarray:
    if at["approximate"] == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf_reference(x / math.sqrt(2.0)))


def _elu_expr(x: Expr, alpha: float) -> Expr:
    return te.select(x < _zero(x), _c(alpha, x) * (te.exp(x) - _c(1.0, x)), x)


RECORDS: tuple[OpDef, ...] = (
    replace(unary_op(Op.RELU, lambda a, at: te.max(a[0], const_like(0, a[0])), lambda x: np.maximum(x, 0)),
            algebra=(unary("relu", Op.RELU),)),
    activation(Op.SIGMOID, lambda a, at: te.sigmoid(a[0]), lambda x, at: _sigmoid(x)),
    activation(Op.SOFTSIGN, lambda a, at: a[0] / (_c(1.0, a[0]) + te.abs(a[0])), lambda x, at: x / (1 + np.abs(x))),
    activation(Op.LEAKY_RELU, lambda a, at: te.select(a[0] >= _zero(a[0]), a[0], a[0] * _c(at["alpha"], a[0])),
               lambda x, at: np.where(x < 0, x * at["alpha"], x), alpha=0.01),
    activation(Op.HARD_SIGMOID, lambda a, at: ew.hard_sigmoid_expr(a[0], at["alpha"], at["beta"]),
               lambda x, at: np.clip(at["alpha"] * x + at["beta"], 0, 1), alpha=0.2, beta=0.5),
    activation(Op.HARD_SWISH, lambda a, at: a[0] * ew.hard_sigmoid_expr(a[0], 1 / 6, 0.5),
               lambda x, at: x * np.clip(x / 6.0 + 0.5, 0, 1)),
    activation(Op.GELU, lambda a, at: ew.gelu_expr(a[0], at["approximate"]), _gelu, approximate="none"),
    activation(Op.ELU, lambda a, at: _elu_expr(a[0], at["alpha"]),
               lambda x, at: np.where(x < 0, at["alpha"] * np.expm1(x), x), alpha=1.0),
    activation(Op.SELU, lambda a, at: _c(at["gamma"], a[0]) * _elu_expr(a[0], at["alpha"]),
               lambda x, at: at["gamma"] * np.where(x <= 0, at["alpha"] * np.expm1(x), x),
               alpha=SELU_ALPHA, gamma=SELU_GAMMA),
    activation(Op.CELU, lambda a, at: te.max(a[0], _zero(a[0]))
               + te.min(_zero(a[0]), _c(at["alpha"], a[0]) * (te.exp(a[0] / _c(at["alpha"], a[0])) - _c(1.0, a[0]))),
               lambda x, at: np.maximum(x, 0) + np.minimum(0, at["alpha"] * np.expm1(x / at["alpha"])), alpha=1.0),
    activation(Op.THRESHOLDED_RELU, lambda a, at: te.select(a[0] > _c(at["alpha"], a[0]), a[0], _zero(a[0])),
               lambda x, at: np.where(x > at["alpha"], x, 0.0), alpha=1.0),
    activation(Op.SOFTPLUS, lambda a, at: _softplus_expr(a[0]), lambda x, at: _softplus(x)),
    activation(Op.MISH, lambda a, at: a[0] * te.tanh(_softplus_expr(a[0])), lambda x, at: x * np.tanh(_softplus(x))),
    activation(Op.SWISH, lambda a, at: a[0] * te.sigmoid(a[0] * _c(at["alpha"], a[0])),
               lambda x, at: x * _sigmoid(at["alpha"] * x), alpha=1.0),
    activation(Op.SHRINK, lambda a, at: te.select(a[0] < _c(-at["lambd"], a[0]), a[0] + _c(at["bias"], a[0]),
                                                  te.select(a[0] > _c(at["lambd"], a[0]), a[0] - _c(at["bias"], a[0]),
                                                            _zero(a[0]))),
               lambda x, at: np.where(x < -at["lambd"], x + at["bias"], np.where(x > at["lambd"], x - at["bias"], 0)),
               lambd=0.5, bias=0.0),
    binary_op(Op.PRELU, lambda a, at: te.select(a[0] < _zero(a[0]), a[0] * a[1], a[0]),
              lambda x, slope: np.where(x < 0, x * slope, x)),
)
