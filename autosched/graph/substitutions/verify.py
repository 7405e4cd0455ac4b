"""Proving substitutions from the operator properties with z3, as TASO does.

Tensors are an uninterpreted sort; every algebra symbol is an uninterpreted function on it
(split's size an integer argument), and `dim0..dim3` give a tensor's dimensions. Each symbol's
`dims` (from its op record) becomes an axiom on the dims of its results; each property
(`properties.py`) a universally quantified equation, guarded by the shape equalities its
variables' symbolic shapes imply. A rule is proved when z3 finds the axioms, the rule's
variable shapes and "some output differs" unsatisfiable; the unsat core names the properties
the proof used. Quantifiers are instantiated by E-matching on the properties' sides, so a
rule z3 cannot prove within its effort (z3's resource count, so the outcome is the same on a
busy machine as on an idle one) is dropped, never assumed.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import z3

from autosched.graph.substitutions.evaluate import agree
from autosched.graph.substitutions.properties import PROPERTIES, Property
from autosched.graph.substitutions.rules import Rule
from autosched.graph.substitutions.terms import App, Dim, SymShape, Term, subterms, symbols

RANK = 4  # dims the encoding tracks: every algebra symbol works on tensors of rank <= 4
#: z3 resource units one proof may spend: the costliest shipped proof needs about 350,000
EFFORT = 1_000_000


@dataclass(frozen=True)
class Proof:
    proved: bool
    properties: tuple[str, ...]  # the properties the proof used (the unsat core)
    status: str  # "proved", "refuted" (z3 found a model: the properties do not imply it), "unknown"


class Prover:
    """The axioms asserted once; `prove` checks one rule in a push/pop scope."""

    def __init__(self, properties: Sequence[Property] = PROPERTIES, effort: int = EFFORT) -> None:
        self.effort = effort
        self.sort = z3.DeclareSort("Tensor")
        self.dim = [z3.Function(f"dim{i}", self.sort, z3.IntSort()) for i in range(RANK)]
        self.funcs: dict[str, z3.FuncDeclRef] = {}
        for name, alg in symbols().items():
            sig = ([z3.IntSort()] if alg.sized else []) + [self.sort] * alg.arity
            self.funcs[name] = z3.Function(name, *sig, self.sort)
        self.solver = z3.Solver()
        self.solver.set(unsat_core=True)
        self.solver.set("smt.mbqi", False)  # E-matching only: fails fast on what it cannot prove
        for axiom in self._dims_axioms():
            self.solver.add(axiom)
        self.names: dict[str, Property] = {}
        for prop in properties:
            self.solver.assert_and_track(self._property_axiom(prop), z3.Bool(f"property:{prop.name}"))
            self.names[prop.name] = prop

    def _dims(self, t: z3.ExprRef) -> list[z3.ArithRef]:
        return [d(t) for d in self.dim]

    def _dims_axioms(self) -> list[z3.BoolRef]:
        axioms = []
        for name, alg in symbols().items():
            xs = [z3.Const(f"x{i}", self.sort) for i in range(alg.arity)]
            n = z3.Int("n")
            app = self.funcs[name](*([n] if alg.sized else []), *xs)
            out = alg.dims([self._dims(x) for x in xs], n)
            bound = ([n] if alg.sized else []) + xs
            for i in range(RANK):  # a result of lower rank has unit dims above it
                axioms.append(z3.ForAll(bound, self.dim[i](app) == (out[i] if i < len(out) else 1), patterns=[app]))
        return axioms

    def encode(self, term: Term, env: Mapping[str, z3.ExprRef], syms: Mapping[str, z3.ArithRef]) -> z3.ExprRef:
        if not isinstance(term, App):
            return env[term.name]
        args = [self.encode(a, env, syms) for a in term.args]
        if term.size is not None:
            args.insert(0, self.int(term.size, syms))
        return self.funcs[term.op](*args)

    @staticmethod
    def int(dim: Dim, syms: Mapping[str, z3.ArithRef]) -> z3.ArithRef:
        out: z3.ArithRef = z3.IntVal(dim.const)
        for s, c in dim.terms:
            out = out + c * syms[s]
        return out

    def _property_axiom(self, prop: Property) -> z3.BoolRef:
        tensors = {v: z3.Const(f"{prop.name}:{v}", self.sort) for v in prop.shapes}
        syms: dict[str, z3.ArithRef] = {}
        for v, shape in prop.shapes.items():  # a symbol that is some variable's whole dim is that dim
            for i, d in enumerate(shape):
                if d.symbol is not None and d.symbol not in syms:
                    syms[d.symbol] = self.dim[i](tensors[v])
        free = sorted({s for t in (prop.lhs, prop.rhs) for sub in subterms(t) if isinstance(sub, App)
                       and sub.size is not None for s in sub.size.symbols}
                      | {s for shape in prop.shapes.values() for d in shape for s in d.symbols} - set(syms))
        ints = {s: z3.Int(f"{prop.name}:{s}") for s in free}
        syms.update(ints)
        guard = [self.dim[i](tensors[v]) == self.int(d, syms)
                 for v, shape in prop.shapes.items() for i, d in enumerate(shape) if d.symbol is None
                 or not z3.eq(syms[d.symbol], self.dim[i](tensors[v]))]
        lhs, rhs = self.encode(prop.lhs, tensors, syms), self.encode(prop.rhs, tensors, syms)
        bound = [*tensors.values(), *ints.values()]
        body = z3.Implies(z3.And(guard), lhs == rhs) if guard else lhs == rhs
        patterns = [side for side, term in ((lhs, prop.lhs), (rhs, prop.rhs))
                    if isinstance(term, App) and all(z3_occurs(b, side) for b in bound)]
        return z3.ForAll(bound, body, patterns=patterns)

    def prove(self, src: Sequence[Term], dst: Sequence[Term], shapes: Mapping[str, SymShape]) -> Proof:
        """Whether every output of `src` equals the matching one of `dst` for all tensors of
        `shapes` (and every positive value of their symbols), given the properties."""
        tensors = {v: z3.Const(f"rule:{v}", self.sort) for v in shapes}
        names = {s for shape in shapes.values() for d in shape for s in d.symbols}
        names |= {s for t in (*src, *dst) for sub in subterms(t) if isinstance(sub, App) and sub.size is not None
                  for s in sub.size.symbols}
        syms = {s: z3.Int(f"rule:{s}") for s in sorted(names)}
        self.solver.push()
        try:
            for s in syms.values():
                self.solver.add(s >= 1)
            for v, shape in shapes.items():
                for i in range(RANK):
                    self.solver.add(self.dim[i](tensors[v]) == (self.int(shape[i], syms) if i < len(shape) else 1))
            self.solver.add(z3.Or([self.encode(a, tensors, syms) != self.encode(b, tensors, syms)
                                   for a, b in zip(src, dst)]))
            spent = self.solver.statistics()
            used = spent.get_key_value("rlimit count") if "rlimit count" in spent.keys() else 0
            self.solver.set("rlimit", used + self.effort)  # z3's limit is on the solver's running total
            result = self.solver.check()
            if result == z3.unsat:
                core = sorted(str(b).removeprefix("property:") for b in self.solver.unsat_core())
                return Proof(True, tuple(core), "proved")
            return Proof(False, (), "refuted" if result == z3.sat else "unknown")
        finally:
            self.solver.pop()


def z3_occurs(var: z3.ExprRef, expr: z3.ExprRef) -> bool:
    """Whether constant `var` occurs in `expr`."""
    if z3.eq(var, expr):
        return True
    return any(z3_occurs(var, child) for child in expr.children())


@dataclass(frozen=True)
class RuleCheck:
    """One rule's proof and numpy test; `problem` is None when both pass."""

    name: str
    proof: Proof
    mismatch: str | None

    @property
    def problem(self) -> str | None:
        if not self.proof.proved:
            return f"rule {self.name}: not proved from the properties (z3: {self.proof.status})"
        if self.mismatch:
            return f"rule {self.name}: the numpy references disagree: {self.mismatch}"
        return None


def check_rules(rules: Sequence[Rule], effort: int = EFFORT, seed: int = 0) -> list[RuleCheck]:
    """Prove every rule again and test it on the numpy references at several shapes."""
    prover = Prover(effort=effort)
    return [RuleCheck(r.name, prover.prove(r.src, r.dst, r.shapes), agree(r.src, r.dst, r.shapes, trials=3, seed=seed))
            for r in rules]
