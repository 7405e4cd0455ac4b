"""A record as the database holds it, independent of any model: what import, export and merge
move around, and what a tuning run's measurements become before they are written."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import autosched
from autosched.database.identity import TargetInfo
from autosched.measure import MeasureInput, MeasureResult, Record


@dataclass(frozen=True)
class WorkloadInfo:
    """A workloads row: a task key in one space version, with what people and reports read."""

    key: str
    op: str
    shapes: str  # JSON list of input shapes
    flops: int | None
    template: str
    space: str

    @classmethod
    def of(cls, inp: MeasureInput) -> WorkloadInfo:
        task, config = inp.task, inp.config.to_json()
        return cls(task.key, task.op, json.dumps([list(s) for s in task.shapes]), getattr(task, "flops", None),
                   config["template"], config["space"])


def config_text(config: dict[str, Any]) -> str:
    """A config as the records and claims tables key it: canonical JSON (sorted keys)."""
    return json.dumps(config, sort_keys=True)


@dataclass(frozen=True)
class StoredRecord:
    """One measurement with its workload and target described in full (no row ids)."""

    key: str              # Task.key
    op: str
    shapes: str           # JSON list of input shapes
    flops: int | None
    config: dict[str, Any]  # Config.to_json(): carries the template and space fingerprint
    target: TargetInfo
    result: MeasureResult
    tuner: str | None = None
    version: str | None = None
    node: str | None = None
    run_s: float | None = None

    @property
    def template(self) -> str:
        return self.config["template"]

    @property
    def space(self) -> str:
        return self.config["space"]

    @property
    def workload(self) -> WorkloadInfo:
        return WorkloadInfo(self.key, self.op, self.shapes, self.flops, self.template, self.space)

    @classmethod
    def of(cls, record: Record, tuner: str | None = None) -> StoredRecord:
        """A measurement of this run; `node` and `run_s` are read when the result carries them."""
        inp, res = record
        w = WorkloadInfo.of(inp)
        return cls(key=w.key, op=w.op, shapes=w.shapes, flops=w.flops, config=inp.config.to_json(),
                   target=TargetInfo.of(inp.target),
                   result=res, tuner=tuner, version=autosched.__version__, node=getattr(res, "node", None),
                   run_s=getattr(res, "run_s", None))

    def to_json(self) -> dict[str, Any]:
        """The interchange line: today's log fields plus where and how it was measured."""
        return {"task": self.key, "target": self.target.target, "config": self.config, **self.result.to_json(),
                "fingerprint": self.target.fingerprint, "isa": self.target.isa, "compiler": self.target.compiler,
                "flops": self.flops, "tuner": self.tuner, "version": self.version, "node": self.node,
                "run_s": self.run_s}
