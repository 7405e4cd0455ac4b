"""Operand views of MatMul: Reshape and Transpose steps a MatMul applies to an input as it reads it.

Why: attention reshapes each projection to [batch, seq, heads, dim] and transposes it to
[batch, heads, seq, dim] (the key to [batch, heads, dim, seq]) before its batched MatMuls, and
transposes and reshapes the context back after them. As nodes of their own these are copy
kernels (BERT layer: seven of them); as a view they are index arithmetic in the MatMul's
operand load, which the matmul's schedule folds into the copy it makes anyway (its packing).
`autosched.graph.passes.fold_views` moves them there; every stage that reads MatMul's shapes or
evaluates it goes through this module.

A view is a tuple of steps, applied in order: ("reshape", shape), ("transpose", perm) or
("slice", (axis, start, stop)), one output of a Split: when graph substitutions merge parallel
projections into one MatMul and split its result (BERT's Q, K and V), each part is read where
the merged MatMul wrote it, with no copy. The attribute `operand_views` holds one view per
input; an absent attribute means no views.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

VIEWS_ATTR = "operand_views"
Step = tuple[str, tuple[int, ...]]
View = tuple[Step, ...]


def operand_views(attrs: Mapping[str, Any] | Sequence[tuple[str, Any]], n_inputs: int = 2) -> tuple[View, ...]:
    """One view per input (empty where the input is read as it is); lists from JSON keys become tuples."""
    attrs = dict(attrs)
    views = attrs.get(VIEWS_ATTR, ())
    out = tuple(tuple((str(kind), tuple(int(v) for v in arg)) for kind, arg in view) for view in views)
    return out + ((),) * (n_inputs - len(out))


def view_shape(shape: Sequence[int], view: View) -> tuple[int, ...]:
    shape = tuple(shape)
    for kind, arg in view:
        if kind == "reshape":
            if int(np.prod(arg)) != int(np.prod(shape)):
                raise ValueError(f"view: cannot reshape {list(shape)} to {list(arg)}")
            shape = tuple(arg)
        elif kind == "transpose":
            if sorted(arg) != list(range(len(shape))):
                raise ValueError(f"view: {list(arg)} is not a permutation of rank {len(shape)}")
            shape = tuple(shape[p] for p in arg)
        elif kind == "slice":
            axis, start, stop = arg
            if not (0 <= axis < len(shape) and 0 <= start < stop <= shape[axis]):
                raise ValueError(f"view: cannot slice [{start}:{stop}] of axis {axis} of {list(shape)}")
            shape = (*shape[:axis], stop - start, *shape[axis + 1:])
        else:
            raise ValueError(f"view: unknown step {kind!r}")
    return shape


def keeps_rows(shape: Sequence[int], view: View) -> bool:
    """Whether the view's innermost axis is the source's innermost, unit stride, so the rows it
    presents are contiguous runs of the source (attention's head split: [s, h·d] seen as
    [h, s, d]). Index arithmetic then simplifies to an affine offset and a MatMul can read such
    an A in place; other views are read once, by a packing copy."""
    shape = tuple(shape)
    for kind, arg in view:
        if kind == "transpose":
            if arg[-1] != len(shape) - 1:
                return False
        elif kind == "slice":  # rows stay contiguous runs, only shorter (a slice of the innermost axis)
            pass
        elif shape[-1] % arg[-1]:  # a reshape may only split the innermost axis (or keep it)
            return False
        shape = view_shape(shape, ((kind, arg),))
    return True


def view_array(x: np.ndarray, view: View) -> np.ndarray:
    """The numpy meaning of a view (the reference evaluator's)."""
    for kind, arg in view:
        if kind == "slice":
            axis, start, stop = arg
            x = x[(slice(None),) * axis + (slice(start, stop),)]
        else:
            x = x.reshape(arg) if kind == "reshape" else np.transpose(x, arg)
    return x


def view_tensor(t, view: View):
    """The view as tensor-expression stages (injective copies a schedule inlines into its reader)."""
    from autosched.ops.transform import reshape, strided_slice, transpose
    for k, (kind, arg) in enumerate(view):
        name = f"{t.name}_view{k}"
        if kind == "slice":
            t = strided_slice(t, arg[1:2], arg[2:3], arg[:1], name=name)
        else:
            t = reshape(t, arg, name=name) if kind == "reshape" else transpose(t, arg, name=name)
    return t


__all__ = ["VIEWS_ATTR", "View", "keeps_rows", "operand_views", "view_shape", "view_array", "view_tensor"]
