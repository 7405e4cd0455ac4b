"""A real task whose template makes faulty kernels on demand, through the real pipeline: an
index far out of bounds (segfault), a reduction of 2^50 steps (never returns), an off-by-one
body (wrong answer); shared by the local and the Ray measurement tests, whose workers import it
by name (a test module would drag its fixtures into every worker)."""
from dataclasses import dataclass

import numpy as np

from autosched import te
from autosched.measure.record import MeasureInput
from autosched.schedule import create_schedule
from autosched.space import ChoiceKnob, ConfigSpace

N = 256


@dataclass(frozen=True)
class AddOneTask:
    """y = x + 1 on N floats: the smallest real task."""
    key: str = "add_one_256"
    op: str = "test_add_one"

    def random_inputs(self, seed: int):
        return [np.random.default_rng(seed).standard_normal(N).astype(np.float32)]

    def reference(self, inputs):
        return [inputs[0] + 1.0]


SPACE = ConfigSpace("test_add_one", [ChoiceKnob("behaviour", ("good", "good_vec", "segfault", "hang", "wrong", "bad_split",
                                                             "rounding"))])


def instantiate(inp: MeasureInput):
    what = inp.config["behaviour"]
    x = te.placeholder((N,), name="x")
    if what == "segfault":
        y = te.compute((N,), lambda i: x[i * 50_000_000] + 1.0, name="y")
    elif what == "hang":
        r1, r2 = te.reduce_axis(1 << 25, "r1"), te.reduce_axis(1 << 25, "r2")
        acc = te.compute((1,), lambda i: te.sum(x[(r1 + r2) % N], [r1, r2]), name="acc")
        y = te.compute((N,), lambda i: x[i] + 1.0 + acc[0] * 0.0, name="y")
    elif what == "wrong":
        y = te.compute((N,), lambda i: x[i] + 2.0, name="y")
    elif what == "rounding":  # off by 2e-4 everywhere, near 0 too: what summation order does to long sums
        y = te.compute((N,), lambda i: x[i] + 1.0002, name="y")
    else:
        y = te.compute((N,), lambda i: x[i] + 1.0, name="y")
    s = create_schedule(y)
    if what == "good_vec":
        _, inner = s[y].split(s[y].op.axes[0], 16)
        s[y].vectorize(inner)
    if what == "bad_split":
        s[y].split(s[y].op.axes[0], 0)
    return s, [x, y]
