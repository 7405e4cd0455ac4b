"""The runner's child process: loads one built kernel at a time, checks it, times it.

Kept in its own process so a kernel that crashes or never returns costs one trial and a
restart, never the tuning run. Speaks JSON lines on stdin/stdout; arrays travel in .npz files
that the parent writes once per task.

    python -m autosched.measure.worker PARENT_PID
"""
from __future__ import annotations

import json
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from autosched.lower.ir import Buffer
from autosched.measure.lifetime import die_with_parent
from autosched.runtime import Kernel
from autosched.runtime.module import BoundArgs

_DATA: dict[str, tuple[list, list]] = {}


def load_data(path: str) -> tuple[list, list]:
    if path not in _DATA:
        with np.load(path) as z:
            n_in, n_out = int(z["n_inputs"]), int(z["n_outputs"])
            _DATA.clear()  # one task at a time: keep memory flat over a long run
            _DATA[path] = ([z[f"in{i}"] for i in range(n_in)], [z[f"out{i}"] for i in range(n_out)])
    return _DATA[path]


def compare_outputs(outputs: list, expected: list, rtol: float, atol: float, outliers: float = 0.0) -> dict | None:
    """None when every output matches its reference (all but a share `outliers` of its
    elements, for kernels that round), else the WRONG_ANSWER reply naming the worst element."""
    for k, (got, want) in enumerate(zip(outputs, expected)):
        # long float32 reductions summed in another order differ by up to ~sqrt(k)·eps of the
        # terms' magnitude, which near a zero crossing dwarfs any fixed atol: scale it by the output's
        finite = np.abs(want[np.isfinite(want)]) if want.dtype.kind == "f" else np.zeros(0)
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        close = np.isclose(got, want, rtol=rtol, atol=atol * scale, equal_nan=False)
        if not close.all() and (np.isnan(got).any() or np.mean(~close) > outliers):
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            where = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), err.shape)
            return {"error": "WRONG_ANSWER",
                    "msg": f"output {k} differs from the reference: at {tuple(int(i) for i in where)} got "
                           f"{got[where]!r}, expected {want[where]!r}"}
    return None


def precompute(folded: dict, inputs: list) -> np.ndarray:
    """A stage that reads only weights, computed before timing as a model build does (`fold`)."""
    params = [Buffer(p["name"], p["dtype"], tuple(p["shape"])) for p in folded["params"]]
    kern = Kernel(folded["lib"], folded["symbol"], params, "")
    out = np.empty(params[-1].shape, dtype=params[-1].dtype)
    kern(*[np.ascontiguousarray(inputs[i]) for i in folded["sources"]], out)
    return out


def activations(n_inputs: int, weights: list[int] | None) -> tuple[int, ...]:
    """The inputs read back into cache after each flush: all but the weights (None: none, every
    input stays as cold as the flush left it)."""
    return () if weights is None else tuple(k for k in range(n_inputs) if k not in weights)


@dataclass
class Loaded:
    """A checked kernel bound to its task's arrays, ready to time."""

    kern: Kernel
    args: BoundArgs
    n_inputs: int
    weights: list[int] | None

    def time(self, repeat: int, min_repeat_ms: float, flush_bytes: int, stop_above: float) -> list[float]:
        return self.kern.time(self.args, repeat=repeat, min_repeat_ms=min_repeat_ms, flush_bytes=flush_bytes,
                              stop_above=stop_above, warm=activations(self.n_inputs, self.weights))


#: kernels checked and held for one interleaved timing (`time_held`), by the runner's slot number
_HELD: dict[int, Loaded] = {}


def load_checked(req: dict) -> Loaded | dict:
    """The request's kernel loaded, run once and compared with the reference; else the reply
    saying why not (a wrong answer), or a GPU kernel emulation's static estimate."""
    manifest = json.loads(open(req["manifest"]).read())
    params = [Buffer(p["name"], p["dtype"], tuple(p["shape"])) for p in manifest["params"]]
    kern = Kernel(manifest["lib"], manifest["symbol"], params, "")
    kern.set_num_threads(int(req["threads"]))
    inputs, expected = load_data(req["data"])
    outputs = [np.full(b.shape, np.nan, dtype=e.dtype) for b, e in zip(params[len(inputs):], expected)]
    args = kern.bind(list(inputs) + outputs + [precompute(f, inputs) for f in manifest.get("folded", ())])
    kern.run(args)
    wrong = compare_outputs(outputs, expected, req["rtol"], req["atol"], req.get("outliers", 0.0))
    if wrong is not None:
        return wrong
    if "static_estimate" in manifest:  # a GPU kernel's emulation: its time is the model's, not this CPU's
        return {"costs": [manifest["static_estimate"]["seconds"]]}
    return Loaded(kern, args, len(inputs), req.get("weights"))


def time_held(req: dict) -> dict:
    """Time the held kernels of `req["slots"]` (slot → its stop_above) in turn, one repeat of
    each per pass, so that every pass meets the host in the same state for all of them and each
    kernel's repeats are spread over the whole batch (on a shared host a core can be taken for
    seconds at a time, `benchmarks/host.py`). A kernel slower than its stop_above (0: none) is
    not timed again. The held kernels are released."""
    try:
        stops = {int(k): float(v) for k, v in req["slots"].items()}
        costs: dict[int, list[float]] = {k: [] for k in stops}
        live = list(stops)
        for _ in range(int(req["repeat"])):
            for k in live:
                costs[k] += _HELD[k].time(1, float(req["min_repeat_ms"]), int(req["flush_bytes"]), stops[k])
            live = [k for k in live if not (stops[k] and costs[k][-1] > stops[k])]
        return {"costs": {str(k): c for k, c in costs.items()}}
    finally:
        _HELD.clear()


def handle(req: dict) -> dict:
    """One request: `slots` times held kernels (`time_held`); with `hold`, a kernel is checked
    and held under that slot; else it is checked and timed at once."""
    if "slots" in req:
        return time_held(req)
    loaded = load_checked(req)
    if not isinstance(loaded, Loaded):
        return loaded
    if "hold" in req:
        _HELD[int(req["hold"])] = loaded
        return {"held": int(req["hold"])}
    return {"costs": loaded.time(int(req["repeat"]), float(req["min_repeat_ms"]), int(req["flush_bytes"]),
                                 float(req["stop_above"]))}


def main() -> None:
    die_with_parent(int(sys.argv[1]))
    for line in sys.stdin:
        try:
            reply = handle(json.loads(line))
        except Exception as e:  # noqa: BLE001 - every failure becomes a result for the parent
            reply = {"error": "RUNTIME_ERROR", "msg": f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
