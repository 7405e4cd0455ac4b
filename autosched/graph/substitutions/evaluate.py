"""Terms evaluated by the op records' numpy references: on floats to test rules and
properties, on integers modulo a prime to fingerprint them.

Evaluating through `OpDef.reference` (the same function constant folding and the model checks
use) is what makes a property's test meaningful: a property that holds here holds for the ops
as autosched runs them.
"""
from __future__ import annotations

from collections.abc import Mapping, MutableMapping

import numpy as np

from autosched.graph.substitutions.terms import App, SymShape, Term, symbol
from autosched.opset.registry import lookup

#: fingerprints are computed modulo this prime, as integers in (-P/2, P/2]; products of two
#: such values summed over a small conv window stay far inside int64
PRIME = 1_000_003


def evaluate(term: Term, env: Mapping[str, np.ndarray], dims: Mapping[str, int],
             cache: MutableMapping[Term, np.ndarray] | None = None, modulus: int | None = None) -> np.ndarray:
    """`term`'s value given its variables' arrays (`env`) and its dimension symbols' values
    (`dims`, for split sizes). With `modulus`, every result is reduced to the symmetric range."""
    cache = {} if cache is None else cache
    if term in cache:
        return cache[term]
    if not isinstance(term, App):
        return env[term.name]
    args = [evaluate(a, env, dims, cache, modulus) for a in term.args]
    cache[term] = value = apply(term, args, dims, modulus)
    return value


def apply(term: App, args: list[np.ndarray], dims: Mapping[str, int], modulus: int | None = None) -> np.ndarray:
    """One symbol applied to concrete operands, through its op's reference."""
    alg = symbol(term.op)
    size = term.size.value(dims) if term.size is not None else None
    attrs = alg.attrs([a.shape for a in args], size)
    with np.errstate(all="ignore"):
        value = lookup(alg.op).reference(attrs, args)[alg.output]
    if modulus is not None:
        value = (value + modulus // 2) % modulus - modulus // 2
    return value


def concrete(shape: SymShape, dims: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d.value(dims) for d in shape)


def random_arrays(shapes: Mapping[str, SymShape], dims: Mapping[str, int], rng: np.random.Generator,
                  modulus: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs: integers in the symmetric range of `modulus`, else standard normal floats."""
    if modulus is not None:
        return {v: rng.integers(-(modulus // 2), modulus // 2, concrete(s, dims)) for v, s in shapes.items()}
    return {v: rng.standard_normal(concrete(s, dims)) for v, s in shapes.items()}


def random_dims(symbols: set[str], rng: np.random.Generator, low: int = 1, high: int = 5) -> dict[str, int]:
    return {s: int(rng.integers(low, high + 1)) for s in sorted(symbols)}


def agree(left: tuple[Term, ...], right: tuple[Term, ...], shapes: Mapping[str, SymShape], trials: int = 3,
          seed: int = 0) -> str | None:
    """None if both term tuples compute the same arrays at `trials` random shape assignments
    (float64, standard normal inputs), else a line saying where they differ."""
    rng = np.random.default_rng(seed)
    syms = {s for shape in shapes.values() for d in shape for s in d.symbols}
    syms |= {s for t in (*left, *right) for sub in _sized(t) for s in sub}
    for _ in range(trials):
        dims = random_dims(syms, rng)
        if any(d.value(dims) <= 0 for shape in shapes.values() for d in shape):
            continue
        env = random_arrays(shapes, dims, rng)
        cache: dict[Term, np.ndarray] = {}
        for a, b in zip(left, right):
            x, y = evaluate(a, env, dims, cache), evaluate(b, env, dims, cache)
            if x.shape != y.shape or not np.allclose(x, y, rtol=1e-9, atol=1e-9):
                return f"{a} and {b} differ at {dims}"
    return None


def _sized(term: Term) -> list[tuple[str, ...]]:
    out = []
    if isinstance(term, App):
        if term.size is not None:
            out.append(term.size.symbols)
        for a in term.args:
            out.extend(_sized(a))
    return out
