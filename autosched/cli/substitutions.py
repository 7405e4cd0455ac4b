"""`autosched substitutions list | verify | generate`: the graph substitution rules."""
from __future__ import annotations

import argparse
import json
import time

from autosched.graph.substitutions.generate import generate
from autosched.graph.substitutions.rules import SHIPPED, load_rules, save_rules
from autosched.graph.substitutions.verify import EFFORT, check_rules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="the rules, their shapes and the properties each proof used")
    listing.add_argument("--json", action="store_true", help="one JSON object: the rule file's contents")
    verify = verbs.add_parser("verify", help="prove every rule again with z3 and test it on the numpy references")
    verify.add_argument("--effort", type=int, default=EFFORT,
                        help=f"z3 resource units per rule (deterministic, unlike a timeout; default {EFFORT})")
    for sub in (listing, verify):
        sub.add_argument("--rules", default=str(SHIPPED), metavar="RULES.json", help="a rule file (default: the shipped one)")
    gen = verbs.add_parser("generate", help="enumerate, fingerprint, prune, prove and test; write the rule file")
    gen.add_argument("-o", "--output", default=str(SHIPPED), metavar="RULES.json",
                     help="where to write the rules (default: the shipped file)")
    gen.add_argument("--max-ops", type=int, default=3, help="operators per enumerated graph (default 3)")
    gen.add_argument("--effort", type=int, default=EFFORT,
                     help=f"z3 resource units per candidate (deterministic, unlike a timeout; default {EFFORT})")
    gen.add_argument("--seed", type=int, default=0, help="seed of the fingerprints' random inputs")


def run(args: argparse.Namespace) -> int:
    return {"list": _list, "verify": _verify, "generate": _generate}[args.verb](args)


def _list(args: argparse.Namespace) -> int:
    rules = load_rules(args.rules)
    if args.json:
        print(json.dumps({"rules": [r.to_json() for r in rules.rules], "generator": dict(rules.generator),
                          "counts": dict(rules.counts)}, indent=1))
        return 0
    for r in rules.rules:
        shapes = " ".join(f"{v}:[{','.join(map(str, s))}]" for v, s in r.shapes.items())
        print(f"{r.name}  {r}")
        print(f"    shapes {shapes}   proof: {', '.join(r.proof) or '-'}")
    print(f"{len(rules.rules)} rules in {args.rules}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    rules = load_rules(args.rules)
    start = time.perf_counter()
    checks = check_rules(rules.rules, args.effort)
    problems = [c.problem for c in checks if c.problem]
    for line in problems:
        print(line)
    print(f"{len(checks) - len(problems)} of {len(checks)} rules proved from the properties and equal on the numpy "
          f"references ({time.perf_counter() - start:.1f} s)")
    return 1 if problems else 0


def _generate(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rules, report = generate(args.max_ops, seed=args.seed, effort=args.effort, progress=print)
    save_rules(args.output, rules)
    print(" ".join(f"{k}: {v}" for k, v in report.counts.items()))
    print(" ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items()) + f"  total {time.perf_counter() - start:.1f} s")
    print(f"wrote {len(rules.rules)} rules to {args.output}")
    return 0
