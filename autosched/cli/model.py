"""The subcommands on one model: tasks, build, run, check, bench and report."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from autosched.api import build, open_database, prepare_graph
from autosched.cli.args import add_build_db_arguments, add_db_argument, add_model_arguments, parse_shape
from autosched.cli.report import write_report
from autosched.compile.evaluate import (
    KernelTime,
    ReferenceSession,
    compare,
    kernel_times,
    latency,
    onnxruntime_session,
    sample_inputs,
)
from autosched.errors import AutoschedError
from autosched.frontend.onnx import load_onnx
from autosched.graph.ir import Op
from autosched.graph.passes import optimize_for
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import TaskSet, extract_tasks
from autosched.tempdirs import temp_dir


def tasks_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_db_argument(parser)


def run_tasks(args: argparse.Namespace) -> int:
    target = Target.parse(args.target)
    graph, report = prepare_graph(args.model, target, dict(args.shape), substitutions=args.substitutions, db=args.db)
    tasks = extract_tasks(optimize_for(graph, target))
    print(f"model: {args.model}")
    print(f"target: {target}")
    print(report.summary())
    print(format_task_table(tasks))
    return 0


def format_task_table(task_set: TaskSet) -> str:
    """One line per task: index, op, weight, GFLOPs (all occurrences), share, shapes, key."""
    total = task_set.total_flops or 1
    header = f"{'#':>3}  {'op':<18} {'weight':>6} {'GFLOPs':>9} {'share':>7}  {'shapes':<40} key"
    lines = [header]
    for i, task in enumerate(task_set.tasks):
        flops = task.flops * task.weight
        shapes = ",".join("x".join(map(str, s)) or "scalar" for s in task.shapes)
        epilogue = "+".join(e.op for e in task.epilogue)
        op = f"{task.op}+{epilogue}" if epilogue else task.op
        lines.append(
            f"{i:>3}  {op:<18} {task.weight:>6} {flops / 1e9:>9.4f} {100 * flops / total:>6.2f}%  {shapes:<40} {task.key}"
        )
    groups = len(task_set.groups)
    lines.append(
        f"{len(task_set.tasks)} tasks for {groups} fused groups, {task_set.total_flops / 1e9:.3f} GFLOPs per inference"
    )
    return "\n".join(lines)


def build_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_build_db_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="the library to write; OUT's .json manifest and .weights go beside it")


def _build(args: argparse.Namespace, output: Path):
    """Build from the database; say once which tasks have records only for another ISA."""
    out = build(args.model, args.target, db=args.db, output=output, shapes=dict(args.shape),
                shipped=not args.no_shipped, emulate=getattr(args, "emulate", False), substitutions=args.substitutions)
    if out.other_isa:
        isas = sorted({isa for found in out.other_isa.values() for isa in found})
        print(f"note: {len(out.other_isa)} tasks have records only for {', '.join(isas)}, not for this target's "
              f"{Target.parse(args.target).isa}: they use the default schedule", file=sys.stderr)
    return out


def run_build(args: argparse.Namespace) -> int:
    out = _build(args, Path(args.output))
    files = out.files
    static = sum(1 for found in out.used.values() if found.static_estimate)
    shipped = f" ({len(out.shipped)} from the shipped records)" if out.shipped else ""
    shipped += f" ({static} chosen by the static model of an emulated tune, not timed on a GPU)" if static else ""
    shipped += (f"; {len(out.declined)} on their default schedule, their best configs having lost in the model or "
                "won alone by too little to tell" if out.declined else "")
    shipped += (f"; {len(out.superseded)} with the fastest config the model judged a win, their best having lost "
                "there or won alone by too little" if out.superseded else "")
    print(f"wrote {files.library}, {files.manifest.name} and {files.weights.name}, "
          f"{out.tuned} of {out.tasks} tasks with tuned schedules{shipped}")
    return 0


def run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("library", metavar="OUT", help="a model built by 'autosched build'")
    parser.add_argument("--inputs", required=True, metavar="X.npz", help="arrays named like the model's inputs")
    parser.add_argument("--outputs", required=True, metavar="Y.npz", help="where to write the outputs")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="skip the SHA-256 check of the library and weights against the manifest (their sizes "
                             "are still checked): for weights of many GB, whose hashing slows every load")


def _outputs_file(path: str) -> str:
    """The file `--outputs` names, as numpy writes it (with `.npz` appended when it lacks it),
    checked writable before the model runs, not after: by creating it (and removing it again
    if it was not there), which answers for root, read-only mounts and /proc alike."""
    target = Path(path if path.endswith(".npz") else path + ".npz")
    if Path(path).is_dir() or target.is_dir():
        raise AutoschedError(f"{path}: is a directory; --outputs names the .npz file to write")
    if not target.parent.is_dir():
        raise AutoschedError(f"{path}: cannot write the outputs: no directory {target.parent}")
    existed = target.exists()
    try:
        with open(target, "ab"):
            pass
    except OSError as e:
        raise AutoschedError(f"{target}: cannot write the outputs: {e.strerror or e}") from None
    if not existed:
        target.unlink()
    return str(target)


def _read_inputs(path: str | None) -> dict[str, np.ndarray]:
    """The arrays of an .npz file of inputs, by name (none without a file)."""
    if path is None:
        return {}
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise AutoschedError(f"{path}: cannot read the inputs: {e}") from None


def run_run(args: argparse.Namespace) -> int:
    outputs_file = _outputs_file(args.outputs)
    model = load_model(args.library, args.verify)
    outputs = model.run(_read_inputs(args.inputs))
    try:
        np.savez(outputs_file, **outputs)  # type: ignore[arg-type]  # numpy's stub matches **outputs against allow_pickle: bool
    except OSError as e:
        raise AutoschedError(f"{outputs_file}: cannot write the outputs: {e.strerror or e}") from None
    print(f"wrote {outputs_file}")
    return 0


def check_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_build_db_arguments(parser)
    parser.add_argument("--rtol", type=float, default=None,
                        help="relative tolerance (default: the target's precision's, 1e-3 at fp32, 1e-2 at tf32 and fp16, 5e-2 at bf16)")
    parser.add_argument("--atol", type=float, default=None,
                        help="absolute tolerance (default: the target's precision's, 1e-4 at fp32, 1e-2 at tf32 and fp16, 5e-2 at bf16)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--inputs", metavar="X.npz", help="arrays for some or all of the model's inputs, by name "
                                                          "(indices, masks, token ids: what random values would not be)")
    parser.add_argument("--emulate", action="store_true",
                        help="with --target cuda: run the CUDA kernels in the CPU emulation (no GPU needed)")
    parser.add_argument("--reference", choices=("onnxruntime", "onnx"), default="onnxruntime",
                        help="what to compare with: onnxruntime (the default), or ONNX's reference evaluator "
                             "(numpy, slow: for models onnxruntime cannot load)")


def _built(args: argparse.Namespace, tmp: str):
    """The model imported, built into `tmp` and loaded, plus the session to compare with (onnxruntime's,
    or ONNX's reference evaluator with `--reference onnx`) and the graph."""
    graph = load_onnx(args.model, dict(args.shape))
    files = _build(args, Path(tmp) / "model.so").files
    threads = getattr(args, "threads", None) or os.cpu_count() or 1
    model = load_model(files.library)
    model.set_num_threads(threads)
    if getattr(args, "reference", "onnxruntime") == "onnx":
        return graph, model, ReferenceSession(Path(args.model))
    return graph, model, onnxruntime_session(Path(args.model), threads)


def run_check(args: argparse.Namespace) -> int:
    target = Target.parse(args.target)
    implied = target.tolerance
    rtol = implied[0] if args.rtol is None else args.rtol
    atol = implied[1] if args.atol is None else args.atol
    given = "given" if (args.rtol, args.atol) != (None, None) else f"the {target.precision} tolerance"
    arrays = _read_inputs(args.inputs)  # an unreadable file fails before the build
    with temp_dir("check") as tmp:
        graph, model, session = _built(args, tmp)
        if unknown := sorted(set(arrays) - {v.name for v in graph.inputs}):
            raise AutoschedError(f"{args.inputs}: {', '.join(unknown)} is no input of the model (its inputs: "
                                 f"{', '.join(v.name for v in graph.inputs)})")
        diffs = compare(model, session, {**sample_inputs(graph, args.seed), **arrays}, rtol, atol)
        model.close()
    print(f"reference: {getattr(session, 'label', 'onnxruntime')}")
    print(f"tolerance: rtol {rtol:g}, atol {atol:g} ({given})")
    print(f"{'output':<32} {'max abs err':>12} {'max rel err':>12}  verdict (rtol {rtol:g}, atol {atol:g})")
    for d in diffs:
        print(f"{d.name:<32} {d.max_abs:12.3e} {d.max_rel:12.3e}  {'ok' if d.ok else 'MISMATCH'}")
    if not all(d.ok for d in diffs) and any(n.op is Op.ROUND for n in graph.nodes):
        print("note: the model quantizes (it rounds to integers): where onnxruntime's integer kernels and "
              "autosched's float32 steps land on either side of a half, a value differs by one quantization "
              "step, and later layers carry it to the outputs; --atol at the output's step compares within it")
    return 0 if all(d.ok for d in diffs) else 1


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_build_db_arguments(parser)
    parser.add_argument("--threads", type=int, default=None, help="threads for both (default: all cores)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each, alternating")
    parser.add_argument("--kernels", type=int, default=0, metavar="N",
                        help="then time each kernel of the build and each node of onnxruntime, alternated, "
                             "and show the N slowest of each beside each other (0: none, the default)")


def run_bench(args: argparse.Namespace) -> int:
    if args.kernels < 0:
        raise AutoschedError(f"--kernels takes how many kernels to show (0 or more), not {args.kernels}")
    with temp_dir("bench") as tmp:
        graph, model, session = _built(args, tmp)
        feeds = sample_inputs(graph, 0)
        lat = latency(model, session, feeds, runs=args.runs)
        threads = args.threads or os.cpu_count() or 1
        kernels = (kernel_times(model, Path(args.model), threads, feeds, args.runs, Path(tmp))
                   if args.kernels else None)
        model.close()
    print(f"model: {args.model}  threads: {args.threads or os.cpu_count()}  runs: {args.runs}")
    print(f"autosched   {lat.autosched_ms:9.3f} ms (median)")
    print(f"onnxruntime {lat.onnxruntime_ms:9.3f} ms (median)")
    print(f"ratio       {lat.ratio:9.3f} (autosched / onnxruntime; below 1 is faster)")
    if kernels is not None:
        _show_kernels(*kernels, args.kernels)
    return 0


def _show_kernels(ours: list[KernelTime], theirs: list[KernelTime], n: int) -> None:
    """Each side's `n` slowest kernels, ranked, and each side's sum (onnxruntime's names its
    optimized graph's nodes: they do not match ours one to one)."""
    print("\nslowest kernels (median ms over the runs, the two alternated in settled blocks):")
    width = 44
    print(f"  {'autosched':<{width}} {'ms':>7}   | {'onnxruntime':<{width}} {'ms':>7}")
    for k in range(min(n, max(len(ours), len(theirs)))):
        left = f"{ours[k].op} {ours[k].name}"[:width] if k < len(ours) else ""
        right = f"{theirs[k].op} {theirs[k].name}"[:width] if k < len(theirs) else ""
        a = f"{ours[k].ms:7.3f}" if k < len(ours) else " " * 7
        b = f"{theirs[k].ms:7.3f}" if k < len(theirs) else ""
        print(f"  {left:<{width}} {a}   | {right:<{width}} {b}")
    print(f"  {f'all {len(ours)} kernels':<{width}} {sum(r.ms for r in ours):7.3f}   | "
          f"{f'all {len(theirs)} nodes':<{width}} {sum(r.ms for r in theirs):7.3f}")


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", nargs="?", help="ONNX model whose tasks to report (default: all)")
    parser.add_argument("--target", default="llvm", help="the machine's target (default llvm: this host)")
    parser.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="NAME=DIMS",
                        help="bind an input's dynamic dimensions (repeatable)")
    add_db_argument(parser)
    parser.add_argument("-o", "--output", default="report.html", metavar="REPORT.html")


def run_report(args: argparse.Namespace) -> int:
    target = Target.parse(args.target).on_this_gpu()  # a GPU's records and timings carry its name
    tasks, substitutions = None, None
    if args.model:
        graph, report = prepare_graph(args.model, target, dict(args.shape), db=args.db)
        tasks, substitutions = extract_tasks(optimize_for(graph, target)).tasks, report.summary()
    with open_database(args.db, read_only=True) as db:
        n = write_report(db, args.output, target, args.model, tasks, substitutions)
    print(f"wrote {args.output} ({n} records)")
    return 0

