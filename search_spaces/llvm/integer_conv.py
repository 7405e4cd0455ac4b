"""CPU template for IntegerConvNCHWc: uint8 by int8 blocked convolutions into int32, by `dot4`.

The shape of the schedule is `autosched.ops.integer_conv.schedule_integer_conv`'s, its register
tile the knobs: `oc_tile` output blocks (one int32 vector each) by `tile_oh` rows by `tile_ow`
columns of pixels. Tiles of more accumulators than `MAX_ACCUMULATORS` spill (the word of each
pixel and the filters' vectors need registers of their own) and are refused.
"""
from __future__ import annotations

from autosched.ops import integer_conv as ic
from autosched.schedule import Schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
from autosched.templates import TemplateError
from search_spaces.llvm.common import CpuTemplate, check_register_tile, cpu_capabilities, nearest, task_tensors

OC_TILES = (1, 2, 4)
ROW_TILES = (1, 2, 4)
COLUMN_TILES = (1, 2, 4, 7, 8, 14, 16, 28)


def _out(task: Task) -> tuple[int, ...]:
    if task.op != "IntegerConvNCHWc":
        raise TemplateError(f"the integer convolution template does not handle op {task.op}")
    return task.out_shapes[0]


class IntegerConvTemplate(CpuTemplate):
    name = "integer_conv_nchwc_llvm"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        _, blocks, oh, ow, _ = _out(task)
        return ConfigSpace(self.name, (
            ChoiceKnob("oc_tile", tuple(t for t in OC_TILES if blocks % t == 0)),
            ChoiceKnob("tile_oh", tuple(t for t in ROW_TILES if t <= oh)),
            ChoiceKnob("tile_ow", tuple(t for t in COLUMN_TILES if t <= ow)),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """`ic.default_tile`, each knob the nearest value the task's space has."""
        _, blocks, oh, ow, _ = _out(task)
        space = self.space(task, target)
        taps = task.shapes[1][2] * task.shapes[1][3]
        wanted = dict(zip(("oc_tile", "tile_oh", "tile_ow"), ic.default_tile(blocks, oh, ow, taps)))
        return space.from_values({name: nearest(space.knob(name).values, want) for name, want in wanted.items()})

    def register_tile(self, task: Task, config: Config, target: Target) -> int:
        return config["oc_tile"] * config["tile_oh"] * config["tile_ow"]

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        check_register_tile(self.register_tile(task, config, target), config, target)
        tt = task_tensors(task)
        out = ic.integer_conv_of(tt.anchor, dict(task.attrs), tt.epilogue)
        s = ic.schedule_integer_conv(out, cpu_capabilities(target).lanes(4), config["oc_tile"], config["tile_oh"],
                                     config["tile_ow"])
        return s, list(tt.args) + [out]


TEMPLATE = IntegerConvTemplate()
