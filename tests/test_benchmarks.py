"""Every benchmark runs in the suite: `--quick --json` in a subprocess, as a user runs it, exits 0
and prints one JSON object with the fields the README and the benchmark's docstring quote.
Figures are not checked against any speed; a benchmark whose code rots fails here, not on the
day someone needs its numbers. The tuning benchmark's database feeds the `--db` runs of the
others, so their tuned columns run too."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

# The fields each benchmark's JSON must have: a dict names keys (None: any value), "*" stands for
# every key of a dict whose keys are data (model names, template labels), a one-element list for
# every item of a list (which must not be empty).
TIMING = {"autosched_gflops": None, "numpy_gflops": None, "ratio": None}
FIELDS: dict[str, Any] = {
    "gemm": {"host": {"cpu": None, "isa": None}, "target": {"target": None, "isa": None, "register_tile": None},
             "matmul_1024": TIMING, "matmul_128x768x3072": TIMING},
    "host": {"host": {"cpu": None, "isa": None}, "threads": None, "window_s": None, "windows": None,
             "one_thread_ms": {"p10": None, "p50": None, "p90": None}, "n_threads_ms": {"p50": None},
             "speedup": {"p10": None, "p50": None, "p90": None, "min": None, "max": None},
             "speedup_histogram": {"*": None}, "full_speed_share": None,
             "slow_phases": {"count": None, "median_s": None, "longest_s": None},
             "spread": {"one_thread": None, "n_threads": None}, "core_round_trip_ns": None},
    "models": {"*": {"autosched_ms": None, "onnxruntime_ms": None, "ratio": None, "tasks": None,
                     "kernel_calls": None, "matches_onnxruntime": None, "tuned_ms": None, "tuned_ratio": None,
                     "speedup_vs_untuned": None, "tuned_verdict": None, "tuned_tasks": None,
                     "baseline_ms": None, "baseline_ratio": None, "speedup_vs_baseline": None,
                     "baseline_verdict": None}},
    "tasks": {"model": None, "threads": None, "target": None,
              "tasks": [{"op": None, "kind": None, "shapes": None, "weight": None, "library_ms": None,
                         "untuned_ms": None}],
              "totals": {"library_ms": None, "untuned_ms": None, "tuned_ms": None},
              "share_by_op": {"untuned_ms": None, "tuned_ms": None}},
    "tuning": {"threads": None, "runs": None, "scheduler": None, "caches": None, "shipped": None, "models": {"*": {
        "untuned": {"ms": None, "onnxruntime_ms": None, "ratio": None, "ok": None},
        "shipped": {"ms": None, "ratio": None, "tasks_from_shipped": None, "tasks": None, "ok": None},
        "checkpoints": [{"trials": None, "tune_wall_s": None, "estimated_ms": None, "model_estimate_ms": None,
                         "check": {"tuned_ms": None, "untuned_ms": None, "first_tuned_ms": None, "declined": None,
                                   "tested": None},
                         "tuned_ms": None, "tuned_ratio": None, "untuned_ms": None, "untuned_ratio": None,
                         "tuned_vs_untuned": None, "rounds": None, "tuned_vs_untuned_interval": None,
                         "verdict": None, "onnxruntime_ms": None, "ok": None, "same_as_untuned": None}]}}},
    "in_model": {"model": None, "threads": None, "llc_bytes": None, "weight_bytes": None, "tasks": [{
        "op": None, "shapes": None, "weight": None, "share": None, "spearman_warm": None, "spearman_cold": None,
        "spearman_flushed": None,
        "configs": [{"index": None, "warm_ms": None, "cold_ms": None, "flushed_ms": None, "in_model_ms": None}]}]},
    "winograd": {"model": None, "target": None, "isa": None, "threads": None, "trials": None,
                 "tasks": [{"op": None, "shapes": None, "weight": None, "direct_ms": None, "winograd_ms": None,
                            "ratio": None, "config": None, "fallback_ms": None, "fallback": None}]},
    "database": {"records_in_file": None, "batch": None, "commit_ms_per_trial": None, "history_ms": None,
                 "history_records": None, "best_ms_per_task": None, "build_s_per_trial": None,
                 "timed_s_per_trial": None},
    "fleet": {"host": {"cores": None, "avx512f": None}, "task": None, "trials": None, "min_repeat_ms": None,
              "trials_per_minute": {"1": None}, "speedup": {"1": None},
              "per_trial_ms": {"local": None, "ray": None, "ray_overhead": None},
              "builds_beside_timings": {mode: {"trials_per_minute": None, "failed": None,
                                               "time_vs_alone_median": None, "time_vs_alone_worst": None}
                                        for mode in ("exclusive", "not exclusive")}},
    "search": {"matmul_1024": {"tuned_gflops": None, "numpy_gflops": None, "ratio": None},
               "conv_resnet": {"tuned_ms": None, "onnxruntime_ms": None, "ratio": None},
               "trials_to_90pct": {"random": None, "ga": None, "xgb": None}},
    "cuda_templates": {"arch": None, "configs_per_task": None, "nvcc": None, "templates": {"*": {
        "tasks": None, "configs": None, "pass_emulation": None, "failures": None, "within_limits": None,
        "over_limits": None, "nvcc_configs_per_s": None,
        "sass": {"registers": None, "occupancy": None, "local": None, "ldg128": None, "lds128": None,
                 "ldsm": None, "shfl": None, "hmma": None, "ldgsts": None}}},
        "static_model": {"configs": None, "built": None, "best_us": None, "median_us": None, "worst_us": None,
                         "fallback_us": None, "fallback_rank": None, "top": [{"config": None, "estimate_us": None}]}},
    "substitutions": {"threads": None, "runs": None, "rules": {"source": None, "max_ops": None, "counts": None,
                                                                "seconds": None},
                      "models": {"*": {"rewrites": None, "kernels_before": None, "kernels_after": None,
                                       "estimated_ms_before": None, "estimated_ms_after": None, "search_s": None,
                                       "pet": None, "matches_onnxruntime": None,
                                       "untuned": {"off_ms": None, "on_ms": None, "onnxruntime_ms": None,
                                                   "on_vs_off": None, "on_vs_off_interval": None, "verdict": None},
                                       "tuned": {"off_ms": None, "on_ms": None, "onnxruntime_ms": None,
                                                 "on_vs_off": None, "on_vs_off_interval": None, "verdict": None,
                                                 "trials": None}}}},
    "shipped": {"threads": None, "isa": None, "threshold": None, "kept": None, "dropped": None, "written": None,
                "models": {"*": {"untuned_ms": None, "shipped_ms": None}}},
    "transfer": {"sources": None, "source_trials": None, "target": None, "trials": None, "seed": None,
                 "runs": {"*": {"started_on": None, "curve": None, "final_ms": None, "trials_to_5pct": None,
                                "trials_to_match": None}}},
    "gpu": {"gpu": None, "arch": None, "tests": None, "checks": None, "static_model": None, "static_model_spearman": None,
            "models": None,
            "kernels": {"*": {"shape": None, "flops": None, "static_us": None, "registers": None, "occupancy": None,
                              "sass": {"ffma": None, "ldg128": None, "lds128": None, "local": None}}}},
}
# `fleet.py --simulate N`: a simulated fleet, two drivers into one database
SIMULATE = {"simulate": {"database": None, "tuner": None, "kernel_ms": None, "cores": None, "cluster_start_s": None,
                         "steps": [{"nodes": None, "devices_per_driver": None, "trials": None, "trials_per_minute": None,
                                    "driver_ms_per_trial": None, "search_ms_per_trial": None,
                                    "database_ms_per_trial": None, "claims_contended": None,
                                    "measured_by_the_other": None, "duplicates": None, "memory_gib": None}]}}
USES_TUNED_DB = ("models", "tasks", "database")  # run with --db: the tuning benchmark's database


def missing(value: Any, spec: Any, path: str = "") -> list[str]:
    """The paths `spec` names that `value` lacks."""
    if spec is None:
        return []
    if isinstance(spec, list):
        if not isinstance(value, list) or not value:
            return [f"{path}[] (a non-empty list)"]
        return [m for i, item in enumerate(value) for m in missing(item, spec[0], f"{path}[{i}]")]
    if not isinstance(value, dict):
        return [f"{path} (an object)"]
    if "*" in spec:
        return [f"{path} (not empty)"] * (not value) + [m for k, v in value.items()
                                                        for m in missing(v, spec["*"], f"{path}.{k}")]
    return [f"{path}.{k}" for k in spec if k not in value] + [m for k, sub in spec.items() if k in value
                                                            for m in missing(value[k], sub, f"{path}.{k}")]


def run_benchmark(name: str, *args: str, cwd: Path, path: str | None = None) -> dict:
    """The benchmark's `--quick --json` output, run as a script from `cwd` (its stdout must be
    exactly one JSON object); `path` replaces PATH (a machine without some tool)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--quick", "--json", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{name}.py exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


def test_every_benchmark_script_is_covered():
    """A new benchmark gets its fields here, or this fails: none can rot unnoticed."""
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(FIELDS)


@pytest.fixture(scope="module")
def tuning(tmp_path_factory) -> tuple[dict, Path]:
    """The tuning benchmark's output and the database it tuned into; the MLP given as a file, as a
    user's own model is."""
    import onnx

    from autosched import zoo

    tmp = tmp_path_factory.mktemp("tuning")
    onnx.save(zoo.mlp(), tmp / "mlp.onnx")
    out = run_benchmark("tuning", "--db-dir", str(tmp / "curves"), "--models", str(tmp / "mlp.onnx"), cwd=tmp)
    (db,) = (tmp / "curves").glob("*.db")
    return out, db


def test_the_missing_fields_of_a_result_are_named():
    """The field check itself: it finds what is absent at any depth, and empty lists and dicts."""
    spec = {"a": {"b": None}, "c": [{"d": None}], "e": {"*": {"f": None}}}
    assert missing({"a": {"b": 1}, "c": [{"d": 2}], "e": {"x": {"f": 3}}}, spec) == []
    assert missing({"a": {}, "c": [{"d": 2}, {}], "e": {"x": {}}}, spec) == [".a.b", ".c[1].d", ".e.x.f"]
    assert missing({"a": 1, "c": [], "e": {}}, spec) == [".a (an object)", ".c[] (a non-empty list)", ".e (not empty)"]


def test_tuning_benchmark(tuning):
    out, _ = tuning
    assert missing(out, FIELDS["tuning"]) == []
    assert list(out["models"]) == ["mlp"]  # a file's model is named by its stem
    (curve,) = out["models"].values()
    assert [c["trials"] for c in curve["checkpoints"]] == [4, 8]
    assert curve["untuned"]["ok"] and curve["shipped"]["ok"] and all(c["ok"] for c in curve["checkpoints"])
    assert all(isinstance(c["same_as_untuned"], bool) for c in curve["checkpoints"])


def test_the_tuning_benchmark_tells_a_rebuilt_untuned_model_from_another_build(tmp_path, monkeypatch):
    """Two builds of one model from no records are the same bytes (what a checkpoint whose check
    declined every tuned config builds); a build of another model is not."""
    import importlib

    import onnx

    from autosched import zoo
    from autosched.api import build

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    tuning = importlib.import_module("tuning")
    for name, model in (("mlp", zoo.mlp()), ("bert", zoo.bert_layer())):
        onnx.save(model, tmp_path / f"{name}.onnx")
    a, b, other = (build(tmp_path / f"{m}.onnx", "llvm", db=tmp_path / "empty.db", output=tmp_path / f"{out}.so",
                         shipped=False).files for m, out in (("mlp", "a"), ("mlp", "b"), ("bert", "c")))
    assert tuning._same_build(a, b) and not tuning._same_build(a, other)


@pytest.mark.parametrize("name", [n for n in FIELDS if n != "tuning"])
def test_benchmark_quick_run(name, tmp_path, request):
    if name == "fleet":
        pytest.importorskip("ray")
    args = ("--db", str(request.getfixturevalue("tuning")[1])) if name in USES_TUNED_DB else ()
    if name == "models":  # this checkout as its own baseline: the other checkout's build runs in its process
        args += ("--baseline", str(ROOT))
    if name == "shipped":
        args += ("--write", str(tmp_path / "kept.jsonl"))
    out = run_benchmark(name, *args, cwd=tmp_path)
    assert missing(out, FIELDS[name]) == []
    if name == "models":
        assert all(model["matches_onnxruntime"] for model in out.values())
    if name == "shipped":  # the records kept are lines of the shipped file, one per task kept
        lines = (tmp_path / "kept.jsonl").read_text().splitlines()
        assert len(lines) == out["written"] == out["kept"] and all(json.loads(line)["task"] for line in lines)
    if name == "transfer":  # the informed runs did start trained on the source's records, the shipped sample of them
        runs = out["runs"]
        assert set(runs) == {"none", "database", "shipped"} and runs["none"]["started_on"] == 0
        assert 0 < runs["shipped"]["started_on"] < runs["database"]["started_on"]
    if name == "substitutions":  # the Inception block's 1x1 convolutions merge: fewer kernels, the same outputs
        assert all(model["matches_onnxruntime"] for model in out["models"].values())
        block = out["models"]["inception_block"]
        assert block["rewrites"] and block["kernels_after"] < block["kernels_before"]
        assert block["pet"]["costed"] > 0 and block["pet"]["corrected"] and 0 < block["pet"]["correction_share"] < 0.05
    if name == "host" and len(os.sched_getaffinity(0)) > 1:  # the cores' round trip was measured
        trips = out["core_round_trip_ns"]
        assert 0 < trips["min"] <= trips["p50"] <= trips["max"] and 0 <= trips["far_share"] < 1
    if name == "cuda_templates":  # each row's fallback config: valid by definition
        assert all(row["pass_emulation"] == 1.0 for row in out["templates"].values())
        assert all(row["within_limits"] == 1.0 for row in out["templates"].values()) or not out["nvcc"]
        assert all(row["sass"]["local"] == 0.0 for row in out["templates"].values())  # no fallback spills


def test_the_models_benchmark_takes_onnx_files(tmp_path):
    """A model no zoo has (here the zoo's MLP saved under another name, its weights in a file
    beside it, as torch's dynamo exporter writes them) is benchmarked from its file."""
    import onnx

    from autosched import zoo

    model = tmp_path / "exported" / "someone_elses.onnx"
    model.parent.mkdir()
    onnx.save(zoo.mlp(), model, save_as_external_data=True, location="someone_elses.onnx.data")
    out = run_benchmark("models", "--models", str(model), cwd=tmp_path)
    assert set(out) == {"someone_elses"} and out["someone_elses"]["matches_onnxruntime"]


def test_the_substitutions_benchmark_takes_onnx_files(tmp_path):
    """Substitutions on and off are timed on any model file, read where it lies."""
    import onnx

    from autosched.zoo_blocks import BLOCKS

    model = tmp_path / "someone_elses.onnx"
    onnx.save(BLOCKS["inception_block"](), model)
    out = run_benchmark("substitutions", "--models", str(model), "--runs", "3", "--generate", "1", cwd=tmp_path)
    (row,) = out["models"].values()
    assert set(out["models"]) == {"someone_elses"} and row["matches_onnxruntime"] and row["rewrites"]


@pytest.mark.slow  # 26 s: a Ray cluster of two nodes and two drivers; the quick fleet run stays in the default suite
def test_the_fleet_simulation(tmp_path):
    """Two nodes, two drivers of 8 trials each, through the Ray path (each driver claims before it
    submits): every trial recorded once, on each driver's own devices. (Whether their claims
    contend depends on timing: a driver that starts late resumes from the other's records.)"""
    pytest.importorskip("ray")
    out = run_benchmark("fleet", "--simulate", "2", cwd=tmp_path)
    assert missing(out, SIMULATE) == []
    (step,) = out["simulate"]["steps"]
    assert (step["nodes"], step["devices_per_driver"], step["trials"], step["duplicates"]) == (2, 2, 16, 0)


@pytest.mark.slow  # 21 s: the quick run with nvcc stays in the default suite
def test_the_gpu_templates_benchmark_without_nvcc_reports_the_emulation(tmp_path):
    """No nvcc on PATH: the emulation's figures still come, without nvcc's, and it exits 0."""
    nvcc = shutil.which("nvcc")
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if nvcc is None or Path(d) != Path(nvcc).parent)
    out = run_benchmark("cuda_templates", cwd=tmp_path, path=path)
    assert out["nvcc"] is False
    assert all(set(row) == {"tasks", "configs", "pass_emulation", "failures"} for row in out["templates"].values())
