"""Indented text for loop nests: what `print(lower(...))` shows a user checking a schedule."""
from __future__ import annotations

from autosched.lower.ir import (
    Allocate,
    AsyncCopy,
    AsyncWait,
    Barrier,
    For,
    ForKind,
    IfThenElse,
    Let,
    Prefetch,
    Seq,
    Stmt,
    Store,
    WarpMma,
)
from autosched.te.printer import expr_str


def stmt_str(s: Stmt, depth: int = 0) -> str:
    pad = "  " * depth
    if isinstance(s, For):
        tag = s.kind.value if s.kind is not ForKind.THREAD else f"bind {s.thread}"
        extra = "".join(f" {k}={v}" for k, v in s.pragmas.items())
        return f"{pad}for {s.var.name} in 0..{s.extent}  # {tag}{extra}\n" + stmt_str(s.body, depth + 1)
    if isinstance(s, AsyncCopy):
        return f"{pad}{s.buffer.name}[{expr_str(s.index)}] <-async- {expr_str(s.value)}\n"
    if isinstance(s, Store):
        return f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}\n"
    if isinstance(s, IfThenElse):
        out = f"{pad}if {expr_str(s.cond)}:\n" + stmt_str(s.then, depth + 1)
        return out + (f"{pad}else:\n" + stmt_str(s.orelse, depth + 1) if s.orelse is not None else "")
    if isinstance(s, Let):
        return f"{pad}let {s.var.name} = {expr_str(s.value)}\n" + stmt_str(s.body, depth)
    if isinstance(s, Allocate):
        b = s.buffer
        return f"{pad}allocate {b.name}: {b.dtype}{list(b.shape)} in {b.scope}\n" + stmt_str(s.body, depth)
    if isinstance(s, Seq):
        return "".join(stmt_str(x, depth) for x in s.stmts)
    if isinstance(s, Barrier):
        return f"{pad}barrier({s.scope})\n"
    if isinstance(s, Prefetch):
        return f"{pad}prefetch {s.buffer.name}[{expr_str(s.index)}]\n"
    if isinstance(s, AsyncWait):
        return f"{pad}async_wait(pending={s.pending})\n"
    if isinstance(s, WarpMma):
        frags = "; ".join(", ".join(expr_str(x) for x in xs) for xs in (s.a, s.b, s.c))
        return f"{pad}mma.{s.shape}.{s.precision}({s.acc.name}: {frags})\n"
    return f"{pad}{type(s).__name__}\n"
