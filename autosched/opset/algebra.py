"""An op's specification for graph substitutions: the symbols it contributes to the algebra.

TASO-style substitution generation and verification reason about graphs as terms over a small
algebra: `matmul(x, concat1(a, b))`, `conv(x, enlarge(w))`. Each symbol is one graph op with
its attributes fixed (a Concat along axis 1, a Conv with stride 1 and "same" padding, a Pad
that enlarges a kernel by one ring of zeros), so a term maps to graph nodes and back. A symbol
lives in its op's record (`OpDef.algebra`), beside the numpy reference that evaluates it, so
each op is specified once.

`dims` and `requires` are written over any additive type: plain ints (a concrete shape),
linear forms over dimension symbols (a rule's symbolic shapes) and z3 integers (the verifier's
shape axioms) all go through the same function.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autosched.graph.ir import Op

Shape = tuple[int, ...]
#: output dims from the operands' dims and the size parameter (split's first part)
DimsFn = Callable[[Sequence[Sequence[Any]], Any], tuple[Any, ...]]
#: pairs of operand dims that must be equal for the application to be well typed
RequiresFn = Callable[[Sequence[Sequence[Any]]], list[tuple[Any, Any]]]
#: the graph node's attributes from concrete operand shapes and the size parameter
AttrsFn = Callable[[Sequence[Shape], "int | None"], dict[str, Any]]


@dataclass(frozen=True)
class AlgebraOp:
    """One symbol of the substitution algebra, implemented by graph op `op`.

    `ranks` gives each operand's rank (None: any rank, the same for all operands). A `sized`
    symbol takes an integer parameter, the size of split's first part along its axis. `output`
    is which output of the graph node the symbol denotes (split's two parts are two symbols);
    `axis` is the axis a concat or split works along.
    """

    name: str
    op: Op
    ranks: tuple[int | None, ...]
    dims: DimsFn
    requires: RequiresFn
    attrs: AttrsFn
    output: int = 0
    sized: bool = False
    axis: int | None = None

    @property
    def arity(self) -> int:
        return len(self.ranks)

    def matches(self, attrs: Mapping[str, Any], shapes: Sequence[Shape], size: int | None) -> bool:
        """Whether a graph node with `attrs` on operands of `shapes` is this symbol."""
        try:
            return dict(attrs) == self.attrs(shapes, size)
        except (ValueError, IndexError):  # operands this symbol cannot take (an even kernel, a wrong rank)
            return False


def no_attrs(shapes: Sequence[Shape], size: int | None) -> dict[str, Any]:
    return {}


def same_dims(args: Sequence[Sequence[Any]]) -> list[tuple[Any, Any]]:
    """Every operand shaped like the first (elementwise ops without broadcasting)."""
    return [(a, b) for other in args[1:] for a, b in zip(args[0], other)]


def unary(name: str, op: Op, attrs: AttrsFn = no_attrs, rank: int | None = None) -> AlgebraOp:
    """A shape-preserving one-operand symbol (relu, pooling with "same" windows)."""
    return AlgebraOp(name, op, (rank,), lambda a, n: tuple(a[0]), lambda a: [], attrs)


def elementwise_binary(name: str, op: Op) -> AlgebraOp:
    """A binary elementwise symbol on equally shaped operands."""
    return AlgebraOp(name, op, (None, None), lambda a, n: tuple(a[0]), same_dims, no_attrs)


def concat(axis: int) -> AlgebraOp:
    """`concat{axis}(x, y)`: x then y along `axis`."""
    return AlgebraOp(
        f"concat{axis}", Op.CONCAT, (None, None),
        lambda a, n: tuple(x + y if i == axis else x for i, (x, y) in enumerate(zip(a[0], a[1]))),
        lambda a: [(x, y) for i, (x, y) in enumerate(zip(a[0], a[1])) if i != axis],
        lambda shapes, n: {"axis": axis}, axis=axis)


def split(axis: int, part: int) -> AlgebraOp:
    """`split{part}_{axis}[n](x)`: the first `n` (part 0) or the remaining (part 1) slices of x
    along `axis`, one output of a two-way Split."""
    def dims(a: Sequence[Sequence[Any]], n: Any) -> tuple[Any, ...]:
        return tuple((n if part == 0 else x - n) if i == axis else x for i, x in enumerate(a[0]))

    return AlgebraOp(f"split{part}_{axis}", Op.SPLIT, (None,), dims, lambda a: [],
                     lambda shapes, n: {"axis": axis, "split": (n, shapes[0][axis] - (n or 0))},
                     output=part, sized=True, axis=axis)
