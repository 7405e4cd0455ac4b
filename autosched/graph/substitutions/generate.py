"""Generating substitutions as TASO does: enumerate, fingerprint, group, prune, verify, test.

1. Enumerate every term of up to `max_ops` algebra symbols over a domain's variables, bottom
   up; a term is built only from subterms that are the first (smallest) of their class, so
   `matmul(transpose(transpose(x)), y)` is never built: `transpose(transpose(x)) -> x` already
   covers it.
2. Fingerprint each term by evaluating it (through the op records' references) on random
   integers modulo a prime at small concrete sizes, with its symbolic shape; terms with equal
   fingerprints form a class, and each later member against the class's first is a candidate.
   Terms that a split cuts into two classes' firsts give two-output candidates: the separate
   `matmul(x,a)`, `matmul(x,b)` against the split of one `matmul(x,concat1(a,b))`.
3. Prune: candidates equal up to renaming variables and dimension symbols, those whose
   variables' shapes are a special case of another candidate of the same form, and those with a
   common subterm whose replacement by a fresh variable gives another candidate.
4. Prove each with z3 (`verify.py`); drop and count the unprovable ones.
5. Test each proved rule on the numpy references at several random shapes.
"""
from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autosched.graph.substitutions.evaluate import PRIME, agree, apply, random_arrays
from autosched.graph.substitutions.rules import Rule, RuleFile
from autosched.graph.substitutions.terms import (
    App,
    Dim,
    SymShape,
    Term,
    TermError,
    Var,
    apply_shape,
    parse_shape,
    parse_term,
    shape_of,
    size,
    substitute,
    subterms,
    symbol,
    variables,
)
from autosched.graph.substitutions.verify import EFFORT, Prover

SPLITS = ("split0_0", "split1_0", "split0_1", "split1_1")


@dataclass(frozen=True)
class Domain:
    """Variables (with symbolic shapes), the symbols enumerated over them, and the concrete
    sizes of the dimension symbols that fingerprints are computed at. `kernels` are variables
    whose enlarged form costs no operator: in a model it is a constant folded at build time,
    so `convb(x, concat0(w, enlarge(u)), concat0(b, c))` counts as three operators; so do the
    terms in `folded`, expressions of variables only (two weight matrices concatenated). Likewise
    an activation in `activations` applied to an anchor in `anchors` costs no operator: it runs
    as the anchor's epilogue, as TASO's convolution carries its activation; and so does a symbol
    in `biases` applied to an anchor and a variable (a dense layer's bias, added in its epilogue)."""

    name: str
    variables: tuple[tuple[str, str], ...]
    sizes: tuple[tuple[str, int], ...]
    ops: tuple[str, ...]
    kernels: tuple[str, ...] = ()
    anchors: tuple[str, ...] = ("conv", "convb", "matmul")
    activations: tuple[str, ...] = ("relu",)
    folded: tuple[str, ...] = ()
    biases: tuple[str, ...] = ()

    @property
    def shapes(self) -> dict[str, SymShape]:
        return {v: parse_shape(s) for v, s in self.variables}


DOMAINS: tuple[Domain, ...] = (
    Domain("matrix", (("x", "M,K"), ("y", "M,K"), ("a", "K,N"), ("b", "K,N"), ("c", "K,P"), ("s", "")),
           (("M", 2), ("K", 3), ("N", 4), ("P", 5)),
           ("add", "mul", "scale", "relu", "matmul", "transpose", "concat0", "concat1", *SPLITS)),
    Domain("conv", (("x", "B,C,H,W"), ("y", "B,C,H,W"), ("w", "F,C,3,3"), ("v", "G,C,3,3"), ("u", "G,C,1,1"),
                    ("b", "F"), ("c", "G")),
           (("B", 1), ("C", 2), ("H", 4), ("W", 5), ("F", 3), ("G", 2)),
           # convolutions with a bias only: BatchNorm folding gives every model's convolution one
           ("add", "relu", "convb", "enlarge", "maxpool", "concat0", "concat1", *SPLITS), kernels=("u",)),
    # dense layers on [batch, tokens, features] reading one input (attention's Q, K and V projections)
    Domain("dense", (("x", "B,M,K"), ("a", "K,N"), ("b", "K,P"), ("d", "N"), ("e", "P")),
           (("B", 2), ("M", 3), ("K", 4), ("N", 5), ("P", 6)),
           ("matmul3", "concat2", "split0_2", "split1_2"), anchors=("matmul3",),
           folded=("concat1(a,b)", "concat0(d,e)"), biases=("addb",)),
    # linear layers as exported (Gemm, weights [N, K], a bias) reading one input
    Domain("linear", (("x", "M,K"), ("w", "N,K"), ("v", "P,K"), ("b", "N"), ("c", "P")),
           (("M", 2), ("K", 3), ("N", 4), ("P", 5)),
           ("gemmt", "concat1", "split0_1", "split1_1"), anchors=("gemmt",),
           folded=("concat0(w,v)", "concat0(b,c)")),
    # pointwise (1x1) convolutions reading one input: an Inception block's branches, whose kernels
    # the conv domain's single 1x1 variable cannot stack
    Domain("pointwise", (("x", "B,C,H,W"), ("u", "F,C,1,1"), ("t", "G,C,1,1"), ("b", "F"), ("c", "G")),
           (("B", 1), ("C", 3), ("H", 4), ("W", 5), ("F", 2), ("G", 4)),
           ("convb", "concat1", "split0_1", "split1_1"), anchors=("convb",),
           folded=("concat0(u,t)", "concat0(b,c)")),
    # attention's products of activations, a scalar factor on either operand or on the product
    # (queries scaled before QK^T, as timm's and Swin's attention write it)
    Domain("attention", (("q", "B,H,M,K"), ("k", "B,H,K,N"), ("v", "B,H,N,P"), ("s", ""), ("t", "")),
           (("B", 2), ("H", 2), ("M", 3), ("K", 4), ("N", 5), ("P", 3)),
           ("scale", "bmatmul"), anchors=("bmatmul",)),
)


@dataclass
class Entry:
    """An enumerated term with its symbolic shape, fingerprint value and split points."""

    term: Term
    shape: SymShape
    value: np.ndarray
    cuts: dict[int, Dim] = field(default_factory=dict)

    @property
    def key(self) -> tuple[SymShape, bytes]:
        return self.shape, hashlib.blake2b(self.value.tobytes(), digest_size=16).digest()


@dataclass(frozen=True)
class Candidate:
    shapes: Mapping[str, SymShape]
    src: tuple[Term, ...]
    dst: tuple[Term, ...]

    def text(self) -> str:
        return " ; ".join(map(str, self.src)) + " => " + " ; ".join(map(str, self.dst))


@dataclass
class Report:
    """Counts and seconds of each step, for the command line and the rule file."""

    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # candidates z3 could not prove, as text


def _cuts(alg_name: str, args: Sequence[Entry], shape: SymShape) -> dict[int, Dim]:
    """Where a split of this term would cut, as TASO tracks it: a concat records its boundary,
    other symbols carry their operands' boundaries to the output axes of the same size."""
    alg = symbol(alg_name)
    if alg.axis is not None:
        return {} if alg.sized else {alg.axis: args[0].shape[alg.axis]}
    cuts: dict[int, Dim] = {}
    for i, d in enumerate(shape):
        for arg in args:
            found = [c for j, c in arg.cuts.items() if arg.shape[j] == d]
            if found:
                cuts[i] = found[0]
                break
    return cuts


class Enumeration:
    """Every term of a domain up to `max_ops` symbols, grouped into fingerprint classes."""

    def __init__(self, domain: Domain, max_ops: int, seed: int = 0) -> None:
        self.domain = domain
        self.sizes = dict(domain.sizes)
        shapes = domain.shapes
        env = random_arrays(shapes, self.sizes, np.random.default_rng(seed), PRIME)
        self.classes: dict[tuple[SymShape, bytes], list[Entry]] = {}
        self.tried = 0
        levels: list[list[Entry]] = [[Entry(Var(v), s, env[v]) for v, s in shapes.items()]]
        levels[0] += [e for e in (self.make("enlarge", (levels[0][list(shapes).index(k)],)) for k in domain.kernels)
                      if e is not None]
        named = {v: levels[0][i] for i, v in enumerate(shapes)}
        for text in domain.folded:
            term = parse_term(text)
            assert isinstance(term, App), text
            made = self.make(term.op, tuple(named[str(a)] for a in term.args))
            if made is not None:
                levels[0].append(made)
        for first in levels[0]:
            self.classes[first.key] = [first]
        for k in range(1, max_ops + 1):
            level: list[Entry] = []
            for name, args in self._applications(levels, k):
                entry = self.make(name, args)
                if entry is None:
                    continue
                heads: list[Entry | None] = [entry]
                if name in domain.anchors:
                    heads += [self.make(bias, (entry, v)) for bias in domain.biases for v in levels[0]]
                    heads += [self.make(act, (h,)) for h in list(heads) if h is not None for act in domain.activations]
                for made in heads:
                    if made is None:
                        continue
                    members = self.classes.setdefault(made.key, [])
                    if not members:
                        level.append(made)
                    members.append(made)
            levels.append(level)

    def _applications(self, levels: list[list[Entry]], k: int) -> Iterator[tuple[str, tuple[Entry, ...]]]:
        for name in self.domain.ops:
            alg = symbol(name)
            for parts in _compositions(k - 1, alg.arity):
                for args in itertools.product(*(levels[p] for p in parts)):
                    if not alg.sized or alg.axis in args[0].cuts:
                        yield name, args

    def make(self, name: str, args: tuple[Entry, ...]) -> Entry | None:
        """The entry of `name` applied to `args`, or None if it is not well typed."""
        alg = symbol(name)
        cut = args[0].cuts.get(alg.axis) if alg.sized and alg.axis is not None else None
        try:
            shape = apply_shape(alg, [a.shape for a in args], cut)
        except TermError:
            return None
        term = App(name, tuple(a.term for a in args), cut)
        try:
            value = apply(term, [a.value for a in args], self.sizes, PRIME)
        except ValueError:  # attributes the op cannot take here (a conv kernel of even size)
            return None
        self.tried += 1
        return Entry(term, shape, value, _cuts(name, args, shape))

    def candidates(self) -> Iterator[Candidate]:
        shapes = self.domain.shapes
        for members in self.classes.values():
            first = members[0]
            for m in members[1:]:
                if m.term != first.term and set(variables(first.term)) <= set(variables(m.term)):
                    yield Candidate(shapes, (m.term,), (first.term,))
        for members in self.classes.values():
            for entry in members:
                yield from self._split_candidates(entry)

    def _split_candidates(self, entry: Entry) -> Iterator[Candidate]:
        """`(r0, r1) => (split0(t), split1(t))` where the parts of t are the classes of r0 and r1."""
        for axis in sorted(entry.cuts):
            parts = [self.make(f"split{p}_{axis}", (entry,)) for p in (0, 1)]
            firsts = [self.classes.get(p.key, [None])[0] if p is not None else None for p in parts]
            if any(f is None or (isinstance(f.term, App) and symbol(f.term.op).sized) for f in firsts):
                continue
            r0, r1 = (f.term for f in firsts if f is not None)
            if r0 == r1 or entry.term == App(f"concat{axis}", (r0, r1)):
                continue
            if set(variables(entry.term)) <= set(variables(r0, r1)):
                yield Candidate(self.domain.shapes, (r0, r1), tuple(p.term for p in parts if p is not None))


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write `total` as `parts` ordered non-negative sizes."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


# Pruning ------------------------------------------------------------------------------------

def canonical(c: Candidate) -> Candidate:
    """Variables renamed a, b, c, ... and dimension symbols A, B, C, ... in order of appearance;
    only the variables the rule reads keep a shape."""
    names = variables(*c.src, *c.dst)
    rename: dict[Term, Term] = {Var(v): Var(chr(ord("a") + i)) for i, v in enumerate(names)}
    dims: dict[str, Dim] = {}
    for v in names:
        for d in c.shapes[v]:
            for s in d.symbols:
                dims.setdefault(s, Dim.of(chr(ord("A") + len(dims))))
    for t in (*c.src, *c.dst):
        for sub in subterms(t):
            if isinstance(sub, App) and sub.size is not None:
                for s in sub.size.symbols:
                    dims.setdefault(s, Dim.of(chr(ord("A") + len(dims))))
    shapes = {rename[Var(v)].name: tuple(d.rename(dims) for d in c.shapes[v])  # type: ignore[union-attr]
              for v in names}
    return Candidate(shapes, tuple(substitute(t, rename, dims) for t in c.src),
                     tuple(substitute(t, rename, dims) for t in c.dst))


def specializes(special: Mapping[str, SymShape], general: Mapping[str, SymShape]) -> bool:
    """Whether some assignment of `general`'s symbols turns its shapes into `special`'s."""
    sigma: dict[str, Dim] = {}
    for v, shape in general.items():
        other = special.get(v)
        if other is None or len(other) != len(shape):
            return False
        for g, s in zip(shape, other):
            if g.symbol is None:
                if g != s:
                    return False
            elif sigma.setdefault(g.symbol, s) != s:
                return False
    return True


def match(pattern: Term, term: Term, binding: dict[str, Term]) -> bool:
    """Whether `term` is `pattern` with its variables replaced (consistently, into `binding`)."""
    if isinstance(pattern, Var):
        return binding.setdefault(pattern.name, term) == term
    return (isinstance(term, App) and term.op == pattern.op and len(term.args) == len(pattern.args)
            and (pattern.size is None) == (term.size is None)
            and all(match(p, t, binding) for p, t in zip(pattern.args, term.args)))


def instance_of(c: Candidate, general: Candidate) -> bool:
    """Whether `c` is `general` with its variables replaced by terms (split sizes aside)."""
    if c is general or len(c.src) != len(general.src):
        return False
    binding: dict[str, Term] = {}
    return all(match(p, t, binding) for p, t in zip((*general.src, *general.dst), (*c.src, *c.dst)))


def prune(candidates: Sequence[Candidate]) -> list[Candidate]:
    """TASO's pruning: renamings, special cases, instances of smaller candidates, common subterms."""
    by_form: dict[str, list[Candidate]] = {}
    for c in map(canonical, candidates):
        same = by_form.setdefault(c.text(), [])
        if not any(specializes(c.shapes, other.shapes) for other in same):
            same[:] = [o for o in same if not specializes(o.shapes, c.shapes)] + [c]
    kept = [c for same in by_form.values() for c in same]

    def covered(c: Candidate) -> bool:
        """A subterm on both sides, replaced by a fresh variable, gives a candidate we keep."""
        inside_dst = {t for d in c.dst for t in subterms(d) if isinstance(t, App)}
        for sub in {t for s in c.src for t in subterms(s) if isinstance(t, App)} & inside_dst:
            if sub in c.src or sub in c.dst:
                continue
            fresh = Var("_")
            try:
                shapes = {**c.shapes, "_": shape_of(sub, c.shapes)}
            except TermError:
                continue
            general = canonical(Candidate(shapes, tuple(substitute(t, {sub: fresh}) for t in c.src),
                                          tuple(substitute(t, {sub: fresh}) for t in c.dst)))
            if any(specializes(general.shapes, o.shapes) for o in by_form.get(general.text(), [])):
                return True
        return False

    roots: dict[tuple[str, ...], list[tuple[int, Candidate]]] = {}
    sizes = {id(c): _size(c) for c in kept}
    for c in kept:
        roots.setdefault(_roots(c), []).append((sizes[id(c)], c))

    def instance(c: Candidate) -> bool:
        """An instance of a smaller candidate, or of one of the same size it is not the general form of."""
        n = sizes[id(c)]
        return any(instance_of(c, g) and (m < n or not instance_of(g, c)) for m, g in roots.get(_roots(c), ()) if m <= n)

    return [c for c in kept if not covered(c) and not instance(c)]


def _roots(c: Candidate) -> tuple[str, ...]:
    return tuple(t.op if isinstance(t, App) else "" for t in (*c.src, *c.dst))


def _size(c: Candidate) -> int:
    return sum(map(size, c.src)) + sum(map(size, c.dst))


# The whole pipeline -------------------------------------------------------------------------

def generate(max_ops: int = 3, domains: Sequence[Domain] = DOMAINS, seed: int = 0, effort: int = EFFORT,
             progress: Callable[[str], None] | None = None) -> tuple[RuleFile, Report]:
    """Enumerate, fingerprint, prune, prove and test: the rules to ship and what each step did."""
    report = Report()
    say = progress or (lambda line: None)
    prover = Prover(effort=effort)
    rules: list[Rule] = []
    totals = dict.fromkeys(("terms", "classes", "candidates", "pruned", "proved", "unprovable", "failed numpy",
                            "shipped"), 0)
    steps = dict.fromkeys(("enumerate", "prune", "verify", "test"), 0.0)
    for domain in domains:
        start = time.perf_counter()
        enum = Enumeration(domain, max_ops, seed)
        found = list(enum.candidates())
        steps["enumerate"] += time.perf_counter() - start
        start = time.perf_counter()
        kept = sorted(prune(found), key=lambda c: (_size(c), c.text()))
        steps["prune"] += time.perf_counter() - start
        totals["terms"] += enum.tried
        totals["classes"] += len(enum.classes)
        totals["candidates"] += len(found)
        totals["pruned"] += len(kept)
        say(f"{domain.name}: {enum.tried} terms, {len(enum.classes)} classes, {len(found)} candidates, "
            f"{len(kept)} after pruning")
        for c in kept:
            start = time.perf_counter()
            proof = prover.prove(c.src, c.dst, c.shapes)
            steps["verify"] += time.perf_counter() - start
            if not proof.proved:
                totals["unprovable"] += 1
                report.dropped.append(f"{domain.name}: {c.text()} ({proof.status})")
                continue
            totals["proved"] += 1
            start = time.perf_counter()
            mismatch = agree(c.src, c.dst, c.shapes, trials=3, seed=seed)
            steps["test"] += time.perf_counter() - start
            if mismatch:
                totals["failed numpy"] += 1
                report.dropped.append(f"{domain.name}: {c.text()} (numpy: {mismatch})")
                continue
            rules.append(Rule(f"{domain.name}-{len([r for r in rules if r.name.startswith(domain.name)]) + 1:04d}",
                              c.shapes, c.src, c.dst, proof.properties))
    totals["shipped"] = len(rules)
    report.counts = totals
    report.seconds = {k: round(v, 2) for k, v in steps.items()}
    generator = {"max_ops": max_ops, "seed": seed, "prime": PRIME, "effort": effort,
                 "domains": [{"name": d.name, "variables": dict(d.variables), "sizes": dict(d.sizes),
                              "ops": list(d.ops)} for d in domains]}
    return RuleFile(tuple(rules), generator, {"counts": totals, "seconds": report.seconds}), report
