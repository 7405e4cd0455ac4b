"""The loop-nest IR that lowering produces and every code generator consumes.

Buffers are flat (one index per access) so back ends only print; all index arithmetic was
decided and simplified during lowering. GPU concepts (thread loops, shared scope, barriers)
live here too: the C back end refuses them, the CUDA back end prints them.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from autosched.te.expr import Expr, Var


class ForKind(enum.Enum):
    """How a loop runs; its value is the word the IR printer and the loop features use."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    UNROLL = "unroll"
    VECTORIZE = "vectorize"
    THREAD = "thread"  # bound to a GPU thread/block axis, named by `For.thread`

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, eq=False)
class Buffer:
    name: str
    dtype: str
    shape: tuple
    scope: str = "global"

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Stmt:
    def __repr__(self) -> str:
        from autosched.lower.printer import stmt_str
        return stmt_str(self)


@dataclass(eq=False, repr=False)
class For(Stmt):
    """for (var = 0; var < extent; ++var); `thread` loops carry the axis they are bound to."""
    var: Var
    extent: int
    kind: ForKind
    body: Stmt
    thread: str = ""
    pragmas: dict = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(eq=False, repr=False)
class Let(Stmt):
    """Binds `var` to `value` for `body`; keeps region offsets readable in generated code."""
    var: Var
    value: Expr
    body: Stmt


@dataclass(eq=False, repr=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(eq=False, repr=False)
class Seq(Stmt):
    stmts: tuple


@dataclass(eq=False, repr=False)
class Barrier(Stmt):
    """Every thread of a block waits here (CUDA __syncthreads)."""
    scope: str = "shared"


@dataclass(eq=False, repr=False)
class Prefetch(Stmt):
    """A hint that `buffer[index]` will be read soon: its cache line is fetched now, without
    waiting for it. It never faults, so `index` may point past the buffer (the tile after the
    last one); a back end without prefetches may drop it."""
    buffer: Buffer
    index: Expr


@dataclass(eq=False, repr=False)
class AsyncCopy(Store):
    """A store from global into shared memory that completes asynchronously (CUDA `cp.async`):
    the value is a global Load, or `Select(cond, Load, 0)` (zero-filled where `cond` is false);
    it is visible only after the AsyncWait that retires its group. A back end without
    asynchronous copies may print it as the Store it also is."""


@dataclass(eq=False, repr=False)
class AsyncCommit(Stmt):
    """Closes the group of this thread's asynchronous copies issued since the last commit."""


@dataclass(eq=False, repr=False)
class AsyncWait(Stmt):
    """Waits until at most `pending` of this thread's committed copy groups are still in flight."""
    pending: int


@dataclass(eq=False, repr=False)
class WarpMma(Stmt):
    """One warp-collective tensor-core multiply-accumulate (PTX `mma.sync`), as one lane sees it:
    the lane's fragments of A (`a`: Loads), B (`b`) and of the accumulator C (`c`: indices into
    the local buffer `acc`), laid out as the PTX ISA lays out `shape` (e.g. m16n8k8), its inputs
    rounded to `precision` ("tf32"). All 32 lanes of a warp must reach it together. `a_rows`,
    where A's fragments are four 8 × 4 tiles of 16-byte, 16-byte-aligned rows in shared memory:
    the index of the row this lane hands `ldmatrix.x4`, which then gives every lane its four
    A registers in one instruction (`tensor_core.mma_statement`)."""
    shape: str
    precision: str
    a: tuple
    b: tuple
    acc: Buffer
    c: tuple
    a_rows: Expr | None = None


#: `PrimFunc.attrs` key: two of the kernel's parameters may be one buffer (it runs in place)
MAY_ALIAS = "may_alias"


@dataclass(eq=False)
class PrimFunc:
    """One kernel: parameters in call order, then the body."""
    name: str
    params: list
    body: Stmt
    attrs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        from autosched.lower.printer import stmt_str
        args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in self.params)
        return f"def {self.name}({args}):\n" + stmt_str(self.body, 1)


def seq(*stmts: Stmt | None) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.stmts if isinstance(s, Seq) else (s,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def stmt_children(s: Stmt) -> tuple:
    if isinstance(s, (For, Allocate, Let)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then,) if s.orelse is None else (s.then, s.orelse)
    if isinstance(s, Seq):
        return s.stmts
    return ()


def walk_stmts(s: Stmt):
    """Every statement, pre-order."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(stmt_children(x)))
