"""Feature extractors: configs → fixed-width numeric rows with named columns.

An extractor is a pure function of (task, space, config index), so rows can be
cached by index. Columns are named so that rows from another task of the same
template (other shapes, hence another space) line up by name for transfer
learning; a column one task lacks reads as 0 for it. `KnobFeatures` reads only
the knob values; `loop_features.LoopFeatures` reads the lowered loop nest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from autosched.measure import TaskLike
from autosched.space import AnnotateKnob, ChoiceKnob, ConfigSpace, Knob, ReorderKnob, SplitKnob


class FeatureExtractor(ABC):
    name: str  # a class attribute, except where an instance composes it (ConcatFeatures)

    @abstractmethod
    def names(self, task: TaskLike, space: ConfigSpace) -> tuple[str, ...]:
        """Column names of `extract`'s rows for this task and space."""

    @abstractmethod
    def extract(self, task: TaskLike, space: ConfigSpace, indices: np.ndarray) -> np.ndarray:
        """float32 rows, one per index, columns as `names`. `indices` may be an
        object array of Python ints (spaces beyond 2**63)."""


@dataclass(frozen=True)
class _Table:
    """Per-knob feature rows indexed by knob position, plus the columns that
    combine knobs (tile volumes), which trees cannot sum by themselves."""

    names: tuple[str, ...]
    per_knob: tuple[np.ndarray, ...]
    innermost_cols: tuple[int, ...]
    inner_cols: tuple[int, ...]


def _split_rows(knob: SplitKnob) -> tuple[list[str], np.ndarray]:
    """log2 of every part, log2 of the inner tile (all but the outermost part) and
    the fraction of iterations wasted by a covering (non-divisible) split."""
    vals = np.array(knob.values, dtype=np.float64)
    inner = vals[:, 1:].prod(axis=1)
    waste = (vals.prod(axis=1) - knob.extent) / knob.extent
    names = [f"{knob.name}.log2[{p}]" for p in range(knob.parts)] + [f"{knob.name}.log2_inner", f"{knob.name}.waste"]
    return names, np.column_stack([np.log2(vals), np.log2(inner), waste])


def _one_hot(knob: Knob, labels: list[str]) -> tuple[list[str], np.ndarray]:
    return [f"{knob.name}={label}" for label in labels], np.eye(len(labels))


def _annotate_rows(knob: AnnotateKnob) -> tuple[list[str], np.ndarray]:
    return _one_hot(knob, [a.value for a in knob.options])


def _reorder_rows(knob: ReorderKnob) -> tuple[list[str], np.ndarray]:
    return _one_hot(knob, [">".join(map(str, c)) for c in knob.candidates])


def _choice_rows(knob: ChoiceKnob) -> tuple[list[str], np.ndarray]:
    """Numeric options stay one ordered column (depth 16 is between 8 and 32);
    anything else is one-hot."""
    if all(isinstance(o, (bool, int, float)) for o in knob.options):
        return [knob.name], np.array([[float(o)] for o in knob.options])
    return _one_hot(knob, [str(o) for o in knob.options])


_ENCODERS: Mapping[type, Callable[..., tuple[list[str], np.ndarray]]] = {
    SplitKnob: _split_rows,
    AnnotateKnob: _annotate_rows,
    ReorderKnob: _reorder_rows,
    ChoiceKnob: _choice_rows,
}


class KnobFeatures(FeatureExtractor):
    """Features from knob values alone; task-independent given the space."""

    name = "knob"

    def __init__(self) -> None:
        self._tables: dict[str, _Table] = {}

    def _table(self, space: ConfigSpace) -> _Table:
        table = self._tables.get(space.fingerprint)
        if table is None:
            names: list[str] = []
            per_knob, innermost, inner = [], [], []
            for knob in space.knobs:
                knob_names, rows = _ENCODERS[type(knob)](knob)
                if isinstance(knob, SplitKnob):
                    innermost.append(len(names) + knob.parts - 1)
                    inner.append(len(names) + knob.parts)
                names += knob_names
                per_knob.append(rows.astype(np.float32))
            names += ["split.log2_innermost_volume", "split.log2_inner_volume"]
            table = _Table(tuple(names), tuple(per_knob), tuple(innermost), tuple(inner))
            self._tables[space.fingerprint] = table
        return table

    def names(self, task: TaskLike, space: ConfigSpace) -> tuple[str, ...]:
        return self._table(space).names

    def extract(self, task: TaskLike, space: ConfigSpace, indices: np.ndarray) -> np.ndarray:
        table = self._table(space)
        digits = space.decode_many(indices)
        parts = [rows[digits[:, k]] for k, rows in enumerate(table.per_knob)]
        x = np.concatenate(parts, axis=1) if parts else np.zeros((len(digits), 0), np.float32)
        volumes = np.column_stack([x[:, list(table.innermost_cols)].sum(axis=1),
                                   x[:, list(table.inner_cols)].sum(axis=1)])
        return np.concatenate([x, volumes.astype(np.float32)], axis=1)

