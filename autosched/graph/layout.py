"""The blocked channel layout NC[H W…][b]c: what layout planning converts tensors to.

A plain [N, C, *spatial] tensor in blocks of b channels is [N, C/b, *spatial, b]: a vector of
b consecutive channels is contiguous, so a convolution's register tile is a vector of output
channels whatever the image width, and an elementwise op keeps its one-to-one indexing. Block
0 names the plain layout. These numpy conversions are the meaning of the `LayoutTransform`
op; compiled kernels and the reference evaluator both follow them.
"""
from __future__ import annotations

import numpy as np


def blocked_shape(shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    """[N, C, *S] → [N, C/block, *S, block]; block 0 leaves the shape plain."""
    if not block:
        return tuple(shape)
    n, c, *spatial = shape
    if c % block:
        raise ValueError(f"{c} channels do not split into blocks of {block}")
    return (n, c // block, *spatial, block)


def plain_shape(shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    """The inverse of `blocked_shape`."""
    if not block:
        return tuple(shape)
    n, cb, *spatial, b = shape
    return (n, cb * b, *spatial)


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    if not block:
        return x
    n, c, *spatial = x.shape
    y = x.reshape(n, c // block, block, *spatial)
    return np.ascontiguousarray(np.moveaxis(y, 2, -1))


def to_plain(x: np.ndarray, block: int) -> np.ndarray:
    if not block:
        return x
    y = np.moveaxis(x, -1, 2)
    return np.ascontiguousarray(y.reshape(plain_shape(x.shape, block)))


def convert(x: np.ndarray, src_block: int, dst_block: int) -> np.ndarray:
    return to_blocked(to_plain(x, src_block), dst_block)


def blocked_groups(c: int, oc: int, groups: int, in_block: int, out_block: int) -> str | None:
    """How a convolution of `groups` groups runs blocked: "dense" (one group), "depthwise" (one
    channel per group, equal blocks in and out), "grouped" (each group a whole number of blocks
    in and out, equal blocks), "lanes" (as many channels in as out per group, several whole
    groups per block: each block of output channels reads the same block of input channels), or
    None when its groups cut through blocks or the blocks do not divide the channels (104
    channels in groups of 8 make no blocks of 16)."""
    if groups == 1:
        return "dense"
    if c % groups or oc % groups or not in_block or in_block != out_block or c % in_block or oc % out_block:
        return None
    if c // groups == 1 and oc == c:
        return "depthwise"
    if (c // groups) % in_block == 0 and (oc // groups) % out_block == 0:
        return "grouped"
    return "lanes" if oc == c and in_block % (c // groups) == 0 else None
