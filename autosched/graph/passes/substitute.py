"""The substitution pass: TASO's cost-based backtracking search over verified rewrites.

Graphs wait in a priority queue by cost. The cheapest is taken, every rule is matched in it
(forward, and backward where the rule allows), and each rewritten graph not seen before is
costed: it becomes the best if it is cheaper than the best so far, and is queued if it costs
less than `alpha` times the best, so the search can pass through slightly worse graphs to
reach better ones. Within one graph, the rewrites that shrink it most are costed first, so the
bound on graphs costed cuts the least promising ones.
The result is the best graph found, or the input when nothing is cheaper: a rewrite that does
not lower the cost is never kept. Ties are broken by the order graphs were found, so a given
cost function gives a given result.
"""
from __future__ import annotations

import hashlib
import heapq
import itertools
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from autosched.errors import AutoschedError
from autosched.graph.ir import Graph
from autosched.graph.substitutions.apply import Matcher, apply, growth
from autosched.graph.substitutions.rules import Rule


class SearchTimeout(AutoschedError):
    """The search ran past its time budget."""


@dataclass(frozen=True)
class SearchResult:
    graph: Graph
    applied: tuple[str, ...]  # the rules that lead from the input to `graph`, in order
    cost_before: float
    cost_after: float
    graphs: int  # distinct graphs costed
    seconds: float
    explored: tuple[tuple[Graph, tuple[str, ...]], ...] = ()  # every graph costed, with its rules


#: digests of the graphs alive, by graph: the search and its cost function ask for each
#: graph's several times (five per graph costed, 4 s of MaxViT's search)
_DIGESTS: weakref.WeakKeyDictionary[Graph, str] = weakref.WeakKeyDictionary()


def graph_digest(graph: Graph) -> str:
    """A digest of what the graph computes, blind to value and node names."""
    if graph not in _DIGESTS:
        _DIGESTS[graph] = _digest(graph)
    return _DIGESTS[graph]


def _digest(graph: Graph) -> str:
    memo: dict[str, str] = {v.name: f"in:{v.name}" for v in graph.inputs}
    memo.update({name: f"const:{name}" for name in graph.constants})
    for node in graph.nodes:
        body = repr((node.op.value, sorted(node.attrs.items()), [memo[i] for i in node.inputs]))
        base = hashlib.blake2b(body.encode(), digest_size=12).hexdigest()
        for k, out in enumerate(node.outputs):
            memo[out] = f"{base}:{k}"
    return hashlib.blake2b(repr([memo[v.name] for v in graph.outputs]).encode() + repr(
        sorted(memo[o] for n in graph.nodes for o in n.outputs)).encode(), digest_size=16).hexdigest()


def search(graph: Graph, rules: Sequence[Rule], cost: Callable[[Graph], float], alpha: float = 1.05,
           budget_s: float = 30.0, max_graphs: int = 100,
           extra: Callable[[Graph], Iterable[tuple[str, Graph]]] | None = None) -> SearchResult:
    """The cheapest graph the rules reach from `graph`, among the first `max_graphs` distinct
    graphs found; SearchTimeout past `budget_s` seconds. `extra` gives further rewrites of the
    input graph, named (PET's corrected transformations), costed before its rule matches."""
    start = time.perf_counter()
    base = cost(graph)
    best, best_cost = graph, base
    best_path: tuple[str, ...] = ()
    order = itertools.count()
    queue: list[tuple[float, int, Graph, tuple[str, ...]]] = [(base, next(order), graph, ())]
    seen = {graph_digest(graph)}
    explored: list[tuple[Graph, tuple[str, ...]]] = []
    while queue and len(seen) < max_graphs:
        current_cost, _, current, path = heapq.heappop(queue)
        if current_cost > alpha * best_cost:
            continue
        matcher = Matcher(current)
        found = [m for r in rules for m in matcher.matches(r)]
        found.sort(key=lambda m: growth(current, m))  # stable: rule order within a class
        rewrites: Iterable[tuple[str, Graph, float]] = ((m.rule.name, apply(current, m), alpha) for m in found)
        if current is graph and extra is not None:
            # few, and costed first (the rules' matches can fill the budget); explored further only
            # if cheaper than the best, since each brings a copy of the graph's rule matches
            rewrites = itertools.chain(((name, g, 0.0) for name, g in extra(graph)), rewrites)
        for name, rewritten, slack in rewrites:
            if time.perf_counter() - start > budget_s:
                raise SearchTimeout(f"the substitution search ran past its budget of {budget_s:g} s "
                                    f"({len(seen)} graphs costed)")
            digest = graph_digest(rewritten)
            if digest in seen:
                continue
            seen.add(digest)
            explored.append((rewritten, (*path, name)))
            c = cost(rewritten)
            improved = c < best_cost
            if improved:
                best, best_cost, best_path = rewritten, c, (*path, name)
            if improved or c < slack * best_cost:  # slack: alpha for rules, 0 for `extra`
                heapq.heappush(queue, (c, next(order), rewritten, (*path, name)))
            if len(seen) >= max_graphs:
                break
    return SearchResult(best, best_path, base, best_cost, len(seen), time.perf_counter() - start, tuple(explored))
