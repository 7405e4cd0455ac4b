"""Static memory planning for the buffers between fused groups.

With every shape static, the whole inference can run out of one arena
allocated once: each intermediate buffer gets a fixed offset, and buffers
that are never alive at the same time share bytes.  Offsets are chosen
greedily, largest buffer first, each in the tightest gap left by the
already placed buffers whose lifetimes overlap it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autosched.graph.ir import Graph
from autosched.graph.passes.fuse import FusedGroup, view_aliases

ALIGNMENT = 64  # bytes; one cache line, and enough for any SIMD load


@dataclass(frozen=True)
class Buffer:
    """An intermediate value's place in the arena, alive from group `first` to `last`."""

    name: str
    offset: int
    size: int
    first: int
    last: int

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last

    def overlaps_in_memory(self, other: Buffer) -> bool:
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


@dataclass(frozen=True)
class MemoryPlan:
    """Arena offsets of every intermediate; graph inputs and outputs live outside it. A Reshape
    that is no kernel (`view_aliases`) has no buffer: its output is its root's bytes."""

    buffers: Mapping[str, Buffer]
    arena_size: int
    aliases: Mapping[str, str] = field(default_factory=dict)  # a Reshape's output → the value it renames

    @property
    def views(self) -> Mapping[str, Buffer]:
        """Every arena value's bytes by name: the buffers, and each alias at its root's buffer."""
        return {**self.buffers, **{alias: self.buffers[root] for alias, root in self.aliases.items()}}


def plan_memory(graph: Graph, groups: Sequence[FusedGroup], alignment: int = ALIGNMENT) -> MemoryPlan:
    """Assign arena offsets to the outputs of `groups`, executed in the given order."""
    external = {v.name for v in (*graph.inputs, *graph.outputs)} | set(graph.constants)
    aliases = view_aliases(graph)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, group in enumerate(groups):
        for name in group.inputs:
            name = aliases.get(name, name)  # a view's readers keep its root alive
            if name in first:
                last[name] = index
        for name in group.outputs:
            if name not in external:
                first[name] = last[name] = index
    sizes = {name: _round_up(graph.values[name].nbytes, alignment) for name in first}
    placed: list[Buffer] = []
    for name in sorted(first, key=lambda n: (-sizes[n], first[n], n)):
        candidate = Buffer(name, 0, sizes[name], first[name], last[name])
        rivals = sorted((b for b in placed if b.overlaps_in_time(candidate)), key=lambda b: b.offset)
        placed.append(Buffer(name, _best_fit(rivals, sizes[name]), sizes[name], first[name], last[name]))
    arena = max((b.offset + b.size for b in placed), default=0)
    return MemoryPlan({b.name: b for b in sorted(placed, key=lambda b: (b.first, b.name))}, arena,
                      {alias: root for alias, root in aliases.items() if root in first})


def _best_fit(rivals: Sequence[Buffer], size: int) -> int:
    """Offset of the smallest gap between `rivals` (sorted by offset) that holds `size`."""
    best_offset, best_gap = None, None
    cursor = 0
    for rival in rivals:
        gap = rival.offset - cursor
        if gap >= size and (best_gap is None or gap < best_gap):
            best_offset, best_gap = cursor, gap
        cursor = max(cursor, rival.offset + rival.size)
    return cursor if best_offset is None else best_offset


def _round_up(size: int, alignment: int) -> int:
    return max(alignment, -(-size // alignment) * alignment)
