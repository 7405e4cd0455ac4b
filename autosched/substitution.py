"""Graph substitutions on a model: the shipped rules searched against the target's costs.

`substitute` is what `tasks`, `tune`, `build`, `check` and `bench` run on an imported model
before the standard pipeline: the graph is cleaned up (identities, constants, BatchNorm folded,
common subexpressions), then TASO's search (`graph/passes/substitute.py`) rewrites it with the
verified rules (`graph/substitutions/rules.json`) wherever that lowers the sum of its tasks'
kernel times (`graph_cost.py`), and their sum by rooflines alone. A rule file that cannot be
read, a rule without a proof from the known properties, and a search past its budget each give
one warning line and the unrewritten graph.
"""
from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autosched.database import Database
from autosched.errors import AutoschedError
from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_batchnorm,
    fold_constants,
    optimize_for,
    remove_identity,
)
from autosched.graph.passes.substitute import SearchTimeout, search
from autosched.graph.substitutions import pet
from autosched.graph.substitutions.apply import directions
from autosched.graph.substitutions.properties import PROPERTIES
from autosched.graph.substitutions.rules import SHIPPED, Rule, load_rules
from autosched.graph.substitutions.terms import App, Term, subterms, symbol
from autosched.graph_cost import GraphCost
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of
from autosched.target import Target

log = logging.getLogger("autosched")

#: seconds the search may take before the model is built unrewritten
BUDGET_S = 60.0
#: graphs up to this factor costlier than the best are explored
ALPHA = 1.05


class UnprovedRuleError(AutoschedError):
    """A rule whose recorded proof does not rest on the known operator properties."""


@dataclass(frozen=True)
class SubstitutionReport:
    """What the optimizer did to one model, for `autosched tasks` and the report."""

    applied: tuple[str, ...] = ()
    cost_before: float = 0.0
    cost_after: float = 0.0
    graphs: int = 0
    seconds: float = 0.0
    measured: int = 0  # task costs from the tuning database
    estimated: int = 0  # task costs from the roofline estimate
    note: str | None = None  # why nothing was searched ("off", or the warning)
    corrected: int = 0  # graphs costed that PET's corrected transformations gave
    tuned: bool = False  # the graph is the one a tuning session in the database tuned (`_tuned`)

    def summary(self) -> str:
        if self.note:
            return f"substitutions: {self.note}"
        kept = "; the graph a tune in the database measured" if self.tuned else ""
        graphs = f"{self.graphs} graph{'s' if self.graphs != 1 else ''}"
        pet = f", {self.corrected} of them PET transformations corrected and verified" if self.corrected else ""
        searched = (f"{graphs} costed in {self.seconds:.1f} s ({self.measured} task costs from the "
                    f"database, {self.estimated} estimated{pet})")
        if not self.applied:
            return f"substitutions: none lowers the estimated cost; {searched}{kept}"
        counts = Counter(self.applied)
        rules = ", ".join(f"{name}" + (f" x{n}" if n > 1 else "") for name, n in counts.items())
        plural = "s" if len(self.applied) > 1 else ""
        return (f"substitutions: {len(self.applied)} rewrite{plural} ({rules}), estimated "
                f"{self.cost_before * 1e3:.3f} -> {self.cost_after * 1e3:.3f} ms; {searched}{kept}")


@functools.cache
def _rules(path: Path) -> tuple[Rule, ...]:
    rules = load_rules(path).rules
    known = {p.name for p in PROPERTIES}
    for rule in rules:
        if not rule.proof or not set(rule.proof) <= known:
            cited = ", ".join(sorted(set(rule.proof) - known)) or "nothing"
            raise UnprovedRuleError(f"{path}: rule {rule.name} is not proved from the operator properties (its "
                                    f"proof cites {cited}); run 'autosched substitutions verify'")
    return tuple(d for d in directions(rules) if not _reorders(d) and not _wraps(d))


def _reorders(rule: Rule) -> bool:
    """Whether the rule only reorders its operators (commutativity, associativity): such a
    rewrite never changes the kernels a graph runs, and searching through them only multiplies
    graphs of equal cost. An elementwise operator moved onto an anchor's result, or off it,
    changes them: there it runs in the anchor's epilogue, elsewhere as a kernel of its own
    (`scale(bmatmul(q, k), s)` for `bmatmul(scale(q, s), k)`: Swin's scaled queries, read
    through views of one projection, cost a copy of all three of Q, K and V)."""
    def ops(terms: tuple[Term, ...]) -> Counter[tuple[str, bool]]:
        return Counter((t.op, _fused(t)) for term in terms for t in subterms(term) if isinstance(t, App))
    return ops(rule.src) == ops(rule.dst)


def _fused(term: App) -> bool:
    """Whether `term` is an elementwise operator applied to an anchor's result (its epilogue)."""
    first = term.args[0] if term.args else None
    return (kind_of(symbol(term.op).op) is OpKind.ELEMWISE and isinstance(first, App)
            and kind_of(symbol(first.op).op) is OpKind.ANCHOR)


def _wraps(rule: Rule) -> bool:
    """Whether the rule's result contains what it matched (`x => split0(concat(x, y))`, the
    reverse of a rule that drops junk): such a rewrite only adds operators around a value the
    graph already computes, and the search spends its graph budget on them (BERT: 64 of 100
    graphs before the Q, K and V projections could all merge)."""
    return any(s in set(subterms(d)) for s, d in zip(rule.src, rule.dst))


#: elementwise ops whose two operands commute, broadcasting included (the properties
#: add-commutative and mul-commutative)
COMMUTATIVE = (Op.ADD, Op.MUL)


def prepare(graph: Graph) -> Graph:
    """The graph the search starts from: the standard pipeline's clean-up passes, so rules see
    convolutions with their BatchNorms folded and weights as constants, and constants read last
    (`constants_last`)."""
    graph = fold_batchnorm(fold_constants(remove_identity(graph)))
    return constants_last(eliminate_dead_code(eliminate_common_subexpressions(graph)))


def constants_last(graph: Graph) -> Graph:
    """`graph` with each Add and Mul that reads a constant first and a computed value second
    reading them the other way round. The rules are matched operand by operand, and they spell
    a bias or a scale second (`addb(matmul3(a, b), c)`); PyTorch's exporter writes a Linear's
    bias first (`Add(bias, MatMul(x, W))`), so no Q, K and V projections of a Hugging Face
    transformer could merge. Swapping operands is proved by commutativity."""
    constants = graph.constants
    nodes = [Node(n.name, n.op, n.inputs[::-1], n.outputs, n.attrs)
             if n.op in COMMUTATIVE and len(n.inputs) == 2 and n.inputs[0] in constants
             and n.inputs[1] not in constants else n for n in graph.nodes]
    if all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph
    return graph.replace(nodes=nodes)


def _tuned(db: Database | None, cost: GraphCost,
           candidates: Sequence[tuple[Graph, tuple[str, ...]]]) -> tuple[Graph, tuple[str, ...]] | None:
    """The candidate whose tasks the latest tuning session in `db` that tuned one of them tuned,
    with its rules; None where no session did. What a tune measured is what `build` builds: a
    search re-run on the records a tune left judged its measured graph against estimates of the
    others, and could choose a graph of untuned tasks (BERT's Q, K and V projections, merged
    into one GEMM for the tune, were built merged two and one)."""
    if db is None:
        return None
    by_tasks: dict[str, tuple[Graph, tuple[str, ...]]] = {}
    for candidate, path in candidates:
        by_tasks.setdefault(cost.task_set(candidate), (candidate, path))
    for session in reversed(db.sessions()):  # latest first
        if session["tasks"] in by_tasks:
            return by_tasks[str(session["tasks"])]
    return None


def substitute(graph: Graph, target: Target, db: Database | None = None, rules: Path = SHIPPED,
               budget_s: float = BUDGET_S, alpha: float = ALPHA,
               fallback: Database | None = None, partial: bool = True) -> tuple[Graph, SubstitutionReport]:
    """`graph` rewritten by the rules where that lowers its cost on `target` (task costs from
    `db` where it has them, else from `fallback`, the shipped records a build falls back to), and
    what was done; the graph unchanged (with a warning) when the rules cannot be used or the
    search runs out of time. With `partial`, the search also costs PET's corrected partially
    equivalent transformations of the graph's convolutions (`graph/substitutions/pet.py`)."""
    try:
        directed = _rules(Path(rules))
    except AutoschedError as e:
        log.warning("%s; substitutions are off", e)
        return graph, SubstitutionReport(note=f"off ({e})")
    start = prepare(graph)
    cost = GraphCost(target, db, lambda g: optimize_for(g, target), fallback)
    try:
        result = search(start, directed, cost, alpha, budget_s, extra=pet.rewrites if partial else None)
    except SearchTimeout as e:
        log.warning("%s; the model is built without substitutions", e)
        return graph, SubstitutionReport(note=f"off ({e})")
    # the estimates are scaled by every record the search met: each graph is judged again with that,
    # and kept only if it is also cheaper by rooflines alone (records and estimates never mix there),
    # or if both it and the input have a record for every tunable task (then the records decide, the
    # untunable copies estimated alike: how PET's transformations pay, a kernel of another shape
    # being faster than its roofline says)
    before, plain = cost(start), cost.roofline(start)
    chosen, after = start, before
    applied: tuple[str, ...] = ()
    for candidate, path in result.explored:
        c = cost(candidate)
        measured = cost.measured_all(candidate) and cost.measured_all(start)
        if c < after and (measured or cost.roofline(candidate) < plain):
            chosen, applied, after = candidate, path, c
    tuned = _tuned(db, cost, ((start, ()), *result.explored))
    if tuned is not None:
        chosen, applied = tuned
        after = cost(chosen)
    corrected = sum(1 for _, path in result.explored if len(path) == 1 and path[0].startswith(pet.PREFIX))
    report = SubstitutionReport(applied, before, after, result.graphs, result.seconds, cost.measured, cost.estimated,
                                corrected=corrected, tuned=tuned is not None)
    return (chosen if applied else graph), report
