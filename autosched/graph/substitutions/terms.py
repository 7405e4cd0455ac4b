"""Terms over the substitution algebra, their symbolic shapes, and their text form.

A term is a variable (a symbolic input tensor) or a symbol of the algebra (`opset/algebra.py`)
applied to terms: `split0_1[N](matmul(x,concat1(a,c)))`. Shapes are tuples of `Dim`, linear
forms over dimension symbols (`K+N`), so a rule generated on one small concrete shape states
for which shapes it holds: the ones its variables' symbolic shapes unify with.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from autosched.errors import AutoschedError
from autosched.opset.algebra import AlgebraOp
from autosched.opset.registry import OPS


class TermError(AutoschedError):
    """A term or dimension that does not parse, or an application that is not well typed."""


@dataclass(frozen=True, order=True)
class Dim:
    """`const + sum(coef * symbol)`: one dimension of a symbolic shape."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(value: int | str | Dim) -> Dim:
        if isinstance(value, Dim):
            return value
        if isinstance(value, int):
            return Dim((), value)
        return Dim(((value, 1),), 0)

    def __add__(self, other: int | str | Dim) -> Dim:
        o = Dim.of(other)
        coefs = dict(self.terms)
        for sym, c in o.terms:
            coefs[sym] = coefs.get(sym, 0) + c
        return Dim(tuple(sorted((s, c) for s, c in coefs.items() if c)), self.const + o.const)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Dim(tuple((s, -c) for s, c in self.terms), -self.const)

    def __sub__(self, other: int | str | Dim) -> Dim:
        return self + -Dim.of(other)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(s for s, _ in self.terms)

    @property
    def symbol(self) -> str | None:
        """The symbol this dim is, if it is exactly one symbol."""
        return self.terms[0][0] if len(self.terms) == 1 and self.terms[0][1] == 1 and not self.const else None

    @property
    def positive(self) -> bool:
        """Positive for every positive value of its symbols."""
        return all(c > 0 for _, c in self.terms) and (self.const > 0 or (bool(self.terms) and self.const >= 0))

    def value(self, symbols: Mapping[str, int]) -> int:
        return self.const + sum(c * symbols[s] for s, c in self.terms)

    def rename(self, mapping: Mapping[str, Dim]) -> Dim:
        out = Dim((), self.const)
        for s, c in self.terms:
            for _ in range(c):
                out = out + mapping.get(s, Dim.of(s))
        return out

    def __str__(self) -> str:
        parts = [s if c == 1 else f"{c}*{s}" for s, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return "+".join(parts).replace("+-", "-")


SymShape = tuple[Dim, ...]


@dataclass(frozen=True, order=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, order=True)
class App:
    """`op(args)`, with `size` for a sized symbol (split's first part)."""

    op: str
    args: tuple[Term, ...]
    size: Dim | None = None

    def __str__(self) -> str:
        size = f"[{self.size}]" if self.size is not None else ""
        return f"{self.op}{size}({','.join(map(str, self.args))})"


Term = Var | App


@functools.cache
def symbols() -> dict[str, AlgebraOp]:
    """Every algebra symbol, from the op records."""
    return {alg.name: alg for record in OPS.values() for alg in record.algebra}


def symbol(name: str) -> AlgebraOp:
    try:
        return symbols()[name]
    except KeyError:
        raise TermError(f"no algebra symbol {name!r}; known: {', '.join(sorted(symbols()))}") from None


def subterms(term: Term) -> Iterator[Term]:
    """`term` and every term inside it, parents before children."""
    yield term
    if isinstance(term, App):
        for arg in term.args:
            yield from subterms(arg)


def variables(*terms: Term) -> list[str]:
    """Variable names in order of first appearance."""
    seen: dict[str, None] = {}
    for term in terms:
        for t in subterms(term):
            if isinstance(t, Var):
                seen.setdefault(t.name)
    return list(seen)


def size(term: Term) -> int:
    """Operators in the term (a shared subterm counts each time it appears)."""
    return 0 if isinstance(term, Var) else 1 + sum(size(a) for a in term.args)


def substitute(term: Term, mapping: Mapping[Term, Term], dims: Mapping[str, Dim] | None = None) -> Term:
    """`term` with subterms in `mapping` replaced (outermost first) and symbols of split sizes renamed."""
    if term in mapping:
        return mapping[term]
    if isinstance(term, Var):
        return term
    sized = term.size.rename(dims) if term.size is not None and dims else term.size
    return App(term.op, tuple(substitute(a, mapping, dims) for a in term.args), sized)


def shape_of(term: Term, shapes: Mapping[str, SymShape]) -> SymShape:
    """The symbolic shape of `term`; raises TermError if it is not well typed."""
    if isinstance(term, Var):
        if term.name not in shapes:
            raise TermError(f"variable {term.name!r} has no shape")
        return shapes[term.name]
    return apply_shape(symbol(term.op), [shape_of(a, shapes) for a in term.args], term.size)


def apply_shape(alg: AlgebraOp, args: list[SymShape], size: Dim | None) -> SymShape:
    """The shape of `alg` applied to operands of shapes `args`; TermError if ill typed."""
    if len(args) != alg.arity:
        raise TermError(f"{alg.name} takes {alg.arity} operands, got {len(args)}")
    if (size is not None) != alg.sized:
        raise TermError(f"{alg.name} {'needs' if alg.sized else 'takes no'} size")
    free = {len(a) for a, r in zip(args, alg.ranks) if r is None}
    if len(free) > 1 or any(r is not None and len(a) != r for a, r in zip(args, alg.ranks)):
        raise TermError(f"{alg.name}: operand ranks {[len(a) for a in args]} do not fit {list(alg.ranks)}")
    if alg.axis is not None and any(len(a) <= alg.axis for a in args):
        raise TermError(f"{alg.name}: operands of rank {[len(a) for a in args]} have no axis {alg.axis}")
    for left, right in alg.requires(args):
        if left != right:
            raise TermError(f"{alg.name}: dims {left} and {right} differ")
    out = tuple(Dim.of(d) for d in alg.dims(args, size))
    if not all(d.positive for d in out):
        raise TermError(f"{alg.name}: dims {[str(d) for d in out]} are not all positive")
    return out


_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z_0-9]*|\d+|[()\[\],+*-])")


def parse_dim(text: str) -> Dim:
    """`K+N`, `3`, `2*K+1` -> Dim."""
    text = text.replace(" ", "")
    if not re.fullmatch(r"-?(\d+\*)?[A-Za-z_0-9]+([+-](\d+\*)?[A-Za-z_0-9]+)*", text):
        raise TermError(f"{text!r} is not a dimension (e.g. K+N, 3, 2*K+1)")
    out = Dim()
    for sign, coef, atom in re.findall(r"([+-]?)(?:(\d+)\*)?([A-Za-z_0-9]+)", text):
        part = Dim.of(int(atom)) if atom.isdigit() else Dim(((atom, int(coef or 1)),), 0)
        out = out - part if sign == "-" else out + part
    return out


def parse_shape(text: str) -> SymShape:
    """`M,K` -> (Dim M, Dim K); the empty string is a scalar's shape."""
    return tuple(parse_dim(part) for part in text.split(",")) if text.strip() else ()


def format_shape(shape: SymShape) -> str:
    return ",".join(map(str, shape))


def parse_term(text: str) -> Term:
    """The text form back into a term: `split0_1[N](matmul(x,concat1(a,c)))`."""
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if "".join(tokens) != text.replace(" ", ""):
        raise TermError(f"{text!r}: unexpected characters")
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos >= len(tokens) or (expected is not None and tokens[pos] != expected):
            found = tokens[pos] if pos < len(tokens) else "the end"
            raise TermError(f"{text!r}: expected {expected or 'more'} at {found!r}")
        pos += 1
        return tokens[pos - 1]

    def term() -> Term:
        name = take()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name):
            raise TermError(f"{text!r}: {name!r} is not a name")
        if pos >= len(tokens) or tokens[pos] not in "([":
            return Var(name)
        sized = None
        if tokens[pos] == "[":
            take("[")
            start = pos
            while pos < len(tokens) and tokens[pos] != "]":
                take()
            sized = parse_dim("".join(tokens[start:pos]))
            take("]")
        take("(")
        args = [term()]
        while tokens[pos:pos + 1] == [","]:
            take(",")
            args.append(term())
        take(")")
        symbol(name)
        return App(name, tuple(args), sized)

    result = term()
    if pos != len(tokens):
        raise TermError(f"{text!r}: trailing {' '.join(tokens[pos:])!r}")
    return result
