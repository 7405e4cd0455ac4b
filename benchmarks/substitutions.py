"""Graph substitutions: how the rules are made, and what they do to models (issue 19).

    python benchmarks/substitutions.py [--json] [--quick] [--models resnet18,squeezenet] [--threads 2]
                                       [--runs 20] [--trials 0] [--generate MAX_OPS]

Rules: the counts and seconds of each step that made the shipped rule file (terms enumerated,
fingerprint classes, candidates, pruned, proved, unprovable, tested; enumerate, prune, verify,
test), or with `--generate MAX_OPS` of a fresh generation of rules of up to that many operators
here (`autosched substitutions generate` without writing the file).

Per model (the zoo's, a SqueezeNet 1.1, whose fire modules have parallel branches, and an Inception
block, whose three 1x1 convolutions read one input; any block of `autosched.zoo_blocks` by name, and
any .onnx file by its path): the
rewrites the optimizer applies (from an empty database, as a first build sees it), kernel calls
before and after, the estimated cost before and after, and the latency of the builds without and
with substitutions against onnxruntime, all timed in one alternating run (medians; the same
threads), each checked against onnxruntime first. With `--trials N`, the model is also tuned for
N trials twice into fresh databases, once per setting (`tune --no-model-check`, so a tuned build
is the database's best configs as they are), and the two tuned builds join the same run.
`--json` prints one object: `rules` (`source`, `counts`, `seconds`) and per model in `models`:
`rewrites`, `kernels_before`, `kernels_after`, `estimated_ms_before`, `estimated_ms_after`,
`search_s`, `pet` (PET on the costliest convolution a transformation cuts: `costed`, `conv`,
`transformation`, `regions`, `corrected`, `checks`, `correction_share`, `estimated_ms_without`,
`estimated_ms_with`; null without convolutions), `matches_onnxruntime`, `untuned` (`off_ms`,
`on_ms`, `onnxruntime_ms`, `on_vs_off`, `on_vs_off_interval`, `verdict`) and `tuned` (the same with
`trials`; null without `--trials`). on/off is the median over rounds (blocks of 5 runs of each build)
of the ratio of the two blocks' medians (`paired_ratio`); its interval holds that median with 95%
probability whatever the noise's law (`paired_interval`), and the verdict (`paired_verdict`) is
"faster" or "slower" only where the interval excludes 1, "too few rounds" below 6 of them:
`--runs 200` gives 40 rounds.
`--quick` is a smoke run: rules of one operator generated, the Inception block, 3 runs, 2 trials.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

from autosched import zoo
from autosched.api import prepare_graph, tune
from autosched.compile.evaluate import (
    alternate_rounds,
    compare,
    joined,
    onnxruntime_session,
    paired_interval,
    paired_ratio,
    paired_verdict,
    sample_inputs,
)
from autosched.compile.model import build_model
from autosched.database import Database, TunedSchedules
from autosched.graph.ir import Graph, Op
from autosched.graph.passes import optimize_for
from autosched.graph.substitutions import pet
from autosched.graph.substitutions.generate import generate
from autosched.graph.substitutions.rules import SHIPPED
from autosched.graph_cost import GraphCost
from autosched.runtime import load_model
from autosched.substitution import prepare
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.zoo_blocks import BLOCKS

#: runs per block of the alternation: short blocks, many rounds, for the interval of on/off
BLOCK = 5


def rules_figures(max_ops: int | None) -> dict:
    """How rules are made: the shipped file's own record of it, or a generation run here."""
    if max_ops is None:
        shipped = json.loads(SHIPPED.read_text())
        return {"source": "shipped rules.json", "max_ops": shipped["generator"]["max_ops"],
                "counts": shipped["counts"]["counts"], "seconds": shipped["counts"]["seconds"]}
    _, report = generate(max_ops)
    return {"source": "generated here", "max_ops": max_ops, "counts": report.counts, "seconds": report.seconds}


def bench_model(path: Path, workdir: Path, threads: int, runs: int, trials: int) -> dict:
    target = Target.parse("llvm")
    off, _ = prepare_graph(path, target, substitutions=False)
    # as a first build without the shipped records (the builds here use none)
    on, report = prepare_graph(path, target, db=Database(workdir / f"{path.stem}-empty.db"), shipped=False)
    libraries = {"untuned_off": build_model(off, workdir / f"{path.stem}-off.so", target).library,
                 "untuned_on": build_model(on, workdir / f"{path.stem}-on.so", target).library}
    if trials:
        for setting in ("off", "on"):
            db = Database(workdir / f"{path.stem}-tuned-{setting}.db")
            tune(path, target, trials, db=db, substitutions=setting == "on", model_check=False)
            # as `autosched build --no-shipped` does
            graph = off if setting == "off" else prepare_graph(path, target, db=db, shipped=False)[0]
            libraries[f"tuned_{setting}"] = build_model(graph, workdir / f"{path.stem}-tuned-{setting}.so", target,
                                                        TunedSchedules(db)).library
    feeds = sample_inputs(off, 0)
    session = onnxruntime_session(path, threads)
    names = [o.name for o in session.get_outputs()]
    models = {key: load_model(lib) for key, lib in libraries.items()}
    try:
        ok = True
        runners = []
        for model in models.values():
            model.set_num_threads(threads)
            ok = ok and all(d.ok for d in compare(model, session, feeds, rtol=1e-3, atol=1e-4))
            ins = [np.ascontiguousarray(feeds[v["name"]]) for v in model.inputs]
            outs = [np.empty(v["shape"], np.dtype(v["dtype"])) for v in model.outputs]
            runners.append(lambda m=model, i=ins, o=outs: m.run_into(i, o))
        rounds = alternate_rounds([*runners, lambda: session.run(names, feeds)], runs, BLOCK)
    finally:
        for model in models.values():
            model.close()
    keys = [*models, "onnxruntime"]
    ms = {key: 1e3 * float(np.median(t)) for key, t in zip(keys, joined(rounds, len(keys)))}

    def row(kind: str) -> dict:
        on, off = keys.index(f"{kind}_on"), keys.index(f"{kind}_off")
        lo, hi = paired_interval(rounds, on, off)
        return {"off_ms": round(ms[f"{kind}_off"], 3), "on_ms": round(ms[f"{kind}_on"], 3),
                "onnxruntime_ms": round(ms["onnxruntime"], 3), "on_vs_off": round(paired_ratio(rounds, on, off), 3),
                "on_vs_off_interval": [round(lo, 3), round(hi, 3)], "verdict": paired_verdict(rounds, on, off)}
    return {"rewrites": list(report.applied), "kernels_before": _calls(off, target), "kernels_after": _calls(on, target),
            "estimated_ms_before": round(report.cost_before * 1e3, 4), "estimated_ms_after": round(report.cost_after * 1e3, 4),
            "search_s": round(report.seconds, 2), "pet": pet_figures(off, target, report.corrected),
            "matches_onnxruntime": ok, "untuned": row("untuned"),
            "tuned": {**row("tuned"), "trials": trials} if trials else None}


def pet_figures(graph: Graph, target: Target, costed: int) -> dict | None:
    """PET on the model's costliest convolution whose transformation needs a correction (else
    the costliest one a transformation cuts): its regions, the output intervals corrected, the
    positions checked, the correction's share of the model's FLOPs, and the estimated model
    time with and without it (task costs as a first build sees them); `costed`: the corrected
    transformations the search costed. None: no convolution is cut."""
    graph = prepare(graph)
    finish = functools.partial(optimize_for, target=target)
    flops = extract_tasks(finish(graph)).total_flops
    convs = sorted((n for n in graph.nodes if n.op is Op.CONV), key=lambda n: -graph.values[n.outputs[0]].size
                   * math.prod(graph.values[n.inputs[1]].shape[1:]))
    found = [f for f in (pet.correct(graph, node, t) for node in convs for t in pet.TRANSFORMS) if f is not None]
    if not found:
        return None
    fixed = min(found, key=lambda f: not f.wrong)  # the first (costliest) with a correction, if any
    cost = GraphCost(target, None, finish)
    return {"costed": costed, "conv": fixed.conv, "transformation": fixed.name, "regions": fixed.regions,
            "corrected": [list(w) for w in fixed.wrong], "checks": fixed.checks,
            "correction_share": round(fixed.correction_flops / flops, 5),
            "estimated_ms_without": round(cost(graph) * 1e3, 4), "estimated_ms_with": round(cost(fixed.graph) * 1e3, 4)}


def _calls(graph: Graph, target: Target) -> int:
    """Kernel calls a build of the graph makes: one per fused group."""
    return len(extract_tasks(optimize_for(graph, target)).groups)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--models", help="comma-separated: zoo model names, squeezenet, the zoo's blocks or paths of "
                   ".onnx files (default: the models, squeezenet and inception_block)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--trials", type=int, default=0, help="also tune each model this many trials per setting")
    p.add_argument("--generate", type=int, metavar="MAX_OPS", help="generate rules of up to MAX_OPS operators here")
    p.add_argument("--quick", action="store_true", help="smoke run: 1-operator rules, the Inception block")
    args = p.parse_args(argv)
    if args.quick:
        args.generate, args.runs, args.trials = 1, 3, 2
    names = (args.models or ("inception_block" if args.quick else ",".join([*zoo.MODELS, "squeezenet", "inception_block"])))
    names = names.split(",")
    out: dict = {"threads": args.threads, "runs": args.runs, "rules": rules_figures(args.generate), "models": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        workdir = Path(tmp)
        for name in names:
            path = workdir / f"{name}.onnx"
            if name.endswith(".onnx"):  # read where it is: an export's weights may lie beside it
                path = Path(name)
                if not path.is_file():
                    p.error(f"no model file {name}")
                name = path.stem
            elif name == "squeezenet":
                onnx.save(zoo.squeezenet(), path)
            elif name in zoo.MODELS:
                onnx.save(zoo.MODELS[name](), path)
            elif name in BLOCKS:
                onnx.save(BLOCKS[name](), path)
            else:
                p.error(f"unknown model {name!r}: expected one of {', '.join([*zoo.MODELS, 'squeezenet', *BLOCKS])}")
            out["models"][name] = bench_model(path, workdir, args.threads, args.runs, args.trials)
    if args.json:
        print(json.dumps(out))
    else:
        _print(out)
    return out


def _print(out: dict) -> None:
    r = out["rules"]
    print(f"rules ({r['source']}, up to {r['max_ops']} operators): "
          + ", ".join(f"{k} {v}" for k, v in r["counts"].items()))
    print("  seconds: " + ", ".join(f"{k} {v}" for k, v in r["seconds"].items()))
    print(f"models ({out['threads']} threads, medians of {out['runs']} alternated runs; on/off: with/without "
          f"substitutions, the median of the rounds' ratios)")
    for name, m in out["models"].items():
        rewrites = ", ".join(m["rewrites"]) or "none"
        print(f"{name}: {len(m['rewrites'])} rewrites ({rewrites}); kernels {m['kernels_before']} -> "
              f"{m['kernels_after']}; estimated {m['estimated_ms_before']:.3f} -> {m['estimated_ms_after']:.3f} ms "
              f"(search {m['search_s']} s); matches onnxruntime: {m['matches_onnxruntime']}")
        if m["pet"]:
            e = m["pet"]
            print(f"  PET: {e['costed']} corrected transformations costed; on {e['conv']}, {e['transformation']}: "
                  f"{e['regions']} regions, outputs {e['corrected']} corrected ({e['checks']} positions checked), "
                  f"correction {100 * e['correction_share']:.2f}% of the FLOPs, estimated {e['estimated_ms_without']:.3f} "
                  f"-> {e['estimated_ms_with']:.3f} ms")
        for kind in ("untuned", "tuned"):
            t = m[kind]
            if t is None:
                continue
            trials = f" ({t['trials']} trials each)" if "trials" in t else ""
            lo, hi = t["on_vs_off_interval"]
            print(f"  {kind}{trials}: off {t['off_ms']:.3f} ms, on {t['on_ms']:.3f} ms (on/off {t['on_vs_off']:.3f}, "
                  f"95% interval {lo:.3f}-{hi:.3f}: {t['verdict']}), onnxruntime {t['onnxruntime_ms']:.3f} ms")


if __name__ == "__main__":
    main()
