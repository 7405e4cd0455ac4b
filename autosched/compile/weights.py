"""The weights file of a built model and the pointers a graph executor passes its kernels.

Both executors (C for CPU builds, CUDA for GPU builds) address the same four arrays: the
caller's inputs and outputs, the weights loaded once from the `.weights` file, and the arena
whose offsets the memory planner chose. Only the arrays' names differ (host or device copies).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autosched.codegen.cstyle import C_TYPES
from autosched.graph.ir import Graph

#: every array in the weights file (and the arena) starts at a multiple of this, a cache line and a zmm load
WEIGHT_ALIGN = 64


@dataclass(frozen=True)
class Arg:
    """A kernel argument: a graph value by name, a stored array by name, or None (the kernel ignores it)."""
    name: str | None


class Weights:
    """The weights file: arrays at 64-byte aligned offsets, each stored once."""

    def __init__(self) -> None:
        self.blob = bytearray()
        self.offsets: dict[str, int] = {}
        self.dtypes: dict[str, str] = {}
        self.sizes: dict[str, int] = {}

    def add(self, name: str, array: np.ndarray) -> str:
        if name not in self.offsets:
            self.blob.extend(b"\0" * (-len(self.blob) % WEIGHT_ALIGN))
            self.offsets[name] = len(self.blob)
            self.dtypes[name] = array.dtype.name
            self.sizes[name] = array.nbytes
            self.blob.extend(np.ascontiguousarray(array).tobytes())
        return name


#: the C arrays a kernel argument points into: the caller's inputs and outputs, the weights, the arena
HOST_BASES = {"inputs": "inputs", "outputs": "outputs", "weights": "model_weights", "arena": "model_arena"}


def arg_pointer(graph: Graph, weights: Weights, buffers, bases: dict = HOST_BASES) -> Callable[[Arg], str]:
    """C for a kernel argument's pointer into the arrays named by `bases` (host or device copies)."""
    inputs = {v.name: k for k, v in enumerate(graph.inputs)}
    outputs = {v.name: k for k, v in enumerate(graph.outputs)}

    def ptr(arg: Arg) -> str:
        name = arg.name
        if name is None:
            return "NULL"
        if name in inputs:  # before outputs: a graph input may also be an output
            return f"({C_TYPES[graph.values[name].dtype]}*){bases['inputs']}[{inputs[name]}]"
        if name in weights.offsets:
            return f"({C_TYPES[weights.dtypes[name]]}*)({bases['weights']} + {weights.offsets[name]})"
        if name in outputs:
            return f"({C_TYPES[graph.values[name].dtype]}*){bases['outputs']}[{outputs[name]}]"
        return f"({C_TYPES[graph.values[name].dtype]}*)({bases['arena']} + {buffers[name].offset})"
    return ptr


def aligned_size(n: int) -> int:
    return max(WEIGHT_ALIGN, -(-n // WEIGHT_ALIGN) * WEIGHT_ALIGN)
