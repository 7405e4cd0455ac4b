"""CPU template for IntegerMatMul: uint8 activations by int8 weights into int32, by `dot4`.

The shape of the schedule is `autosched.ops.integer_matmul.schedule_integer_matmul`'s, with
its constants as knobs: `mr` rows by `nr` int32 columns (whole vectors) per register block,
`mb` blocks per tile, `k_unroll` words of four k steps unrolled. mr · nr / lanes accumulators
should fit the register file; the tiles that cannot are refused.
"""
from __future__ import annotations

from autosched.ops import integer_matmul as imm
from autosched.schedule import Schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
from autosched.templates import TemplateError
from search_spaces.llvm.common import CpuTemplate, check_register_tile, cpu_capabilities, nearest, task_tensors

MR_CHOICES = (1, 2, 4, 6, 8, 12, 16)
NR_VECTORS = (1, 2, 3, 4)
MB_CHOICES = (1, 2, 4, 8)
K_UNROLL = (1, 2, 4, 8)


def _dims(task: Task) -> tuple[int, int, int]:
    """(m, n, k): rows of A (its batch dims counted as rows), columns of B, the reduction."""
    if task.op != "IntegerMatMul":
        raise TemplateError(f"the integer matmul template does not handle op {task.op}")
    a, b = task.shapes[0], task.shapes[1]
    return a[-2], b[1], a[-1]


class IntegerMatmulTemplate(CpuTemplate):
    name = "integer_matmul_llvm"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        m, n, k = _dims(task)
        lanes = cpu_capabilities(target).lanes(4)
        widths = tuple(lanes * v for v in NR_VECTORS if lanes * v <= -(-n // lanes) * lanes) or (lanes,)
        words = -(-k // imm.WORD)
        return ConfigSpace(self.name, (
            ChoiceKnob("mr", tuple(r for r in MR_CHOICES if r <= m) or (1,)),
            ChoiceKnob("nr", widths),
            ChoiceKnob("mb", tuple(b for b in MB_CHOICES if b == 1 or b <= -(-m // 2))),
            ChoiceKnob("k_unroll", tuple(u for u in K_UNROLL if words % u == 0)),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """`imm.DEFAULT_TILE`, each knob the nearest value the task's space has."""
        space = self.space(task, target)
        lanes = cpu_capabilities(target).lanes(4)
        mr, mb, vectors, k_unroll = imm.DEFAULT_TILE
        wanted = {"mr": mr, "nr": vectors * lanes, "mb": mb, "k_unroll": k_unroll}
        return space.from_values({name: nearest(space.knob(name).values, want) for name, want in wanted.items()})

    def register_tile(self, task: Task, config: Config, target: Target) -> int:
        return config["mr"] * -(-config["nr"] // cpu_capabilities(target).lanes(4))

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        check_register_tile(self.register_tile(task, config, target), config, target)
        tt = task_tensors(task)
        out = imm.integer_matmul(tt.anchor[0], tt.anchor[1], config["nr"], config["mr"] * config["mb"],
                                 epilogue=tt.epilogue)
        s = imm.schedule_integer_matmul(out, cpu_capabilities(target).lanes(4), config["mr"], config["mb"],
                                        config["k_unroll"])
        return s, list(tt.args) + [out]


TEMPLATE = IntegerMatmulTemplate()
