"""Every op's record, looked up by graph op or by the ONNX op type that imports as it.

The table is assembled from the family modules' `RECORDS`; adding an op means adding its
record to one family. Construction checks that every graph op has exactly one record and every
ONNX op type one importer, so a gap or a clash fails at import, not in the middle of a model.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from autosched.frontend.context import Converter
from autosched.graph.ir import Op
from autosched.opset import (
    activation,
    chain,
    conv,
    elementwise,
    grid_sample,
    layout,
    logic,
    matmul,
    norm,
    pool,
    reduce,
    resize,
    transform,
)
from autosched.opset.record import OpDef, OpKind, UnknownOpError


def _by_op(records: Iterable[OpDef]) -> dict[Op, OpDef]:
    table: dict[Op, OpDef] = {}
    for record in records:
        if record.op in table:
            raise ValueError(f"op {record.op} has two records")
        table[record.op] = record
    missing = set(Op) - set(table)
    if missing:
        raise ValueError(f"ops without a record: {sorted(op.value for op in missing)}")
    return table


def _by_onnx_type(records: Iterable[OpDef]) -> dict[str, Converter]:
    table: dict[str, Converter] = {}
    for record in records:
        for onnx_type, converter in record.importers.items():
            if onnx_type in table:
                raise ValueError(f"ONNX op {onnx_type} has two importers")
            table[onnx_type] = converter
    return table


#: graph op -> its record, every op of the IR's vocabulary
OPS: Mapping[Op, OpDef] = _by_op((*elementwise.RECORDS, *activation.RECORDS, *logic.RECORDS, *conv.RECORDS,
                                  *matmul.RECORDS, *pool.RECORDS, *norm.RECORDS, *reduce.RECORDS, *transform.RECORDS,
                                  *layout.RECORDS, *resize.RECORDS, *grid_sample.RECORDS,
                                  *chain.chain_records(lambda op: lookup(op))))  # `lookup` is defined below

#: ONNX op type -> the converter that imports it as a graph op
IMPORTERS: Mapping[str, Converter] = _by_onnx_type(OPS.values())


def lookup(op: Op | str) -> OpDef:
    """The record of a graph op, given as `Op` or as its name (task keys store the name)."""
    try:
        return OPS[Op(op)]
    except ValueError:
        raise UnknownOpError(f"no op {op!r} in the op set; known: {', '.join(sorted(o.value for o in OPS))}") from None


def kind_of(op: Op) -> OpKind:
    """The op's family, as fusion and layout planning see it."""
    return OPS[op].kind
