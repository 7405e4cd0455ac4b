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
from search_spaces.llvm.common import CpuTemplate, check_register_tile, cpu_capabilities, task_tensors

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
        """`ic.default_tile`: two output blocks by the widest divisor of the row within 16
        accumulators, where the space has it (else its widest column tile within them)."""
        _, blocks, _, ow, _ = _out(task)
        space = self.space(task, target)
        oc_tile, tile_oh, tile_ow = ic.default_tile(blocks, ow)
        columns = space.knob("tile_ow").values
        if tile_ow not in columns:
            tile_ow = max(c for c in columns if c * oc_tile <= ic.DEFAULT_ACCUMULATORS)
        return space.from_values({"oc_tile": oc_tile, "tile_oh": tile_oh, "tile_ow": tile_ow})

    def register_tile(self, task: Task, config: Config, target: Target) -> int:
        return config["oc_tile"] * config["tile_oh"] * config["tile_ow"]

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        check_register_tile(self.register_tile(task, config, target), config, target)
        tt = task_tensors(task)
        out = ic.integer_conv_of(tt.anchor[0], tt.anchor[1], dict(task.attrs), tt.epilogue)
        s = ic.schedule_integer_conv(out, cpu_capabilities(target).lanes(4), config["oc_tile"], config["tile_oh"],
                                     config["tile_ow"])
        return s, list(tt.args) + [out]


TEMPLATE = IntegerConvTemplate()
