"""Rules matched in a graph and applied to it.

A rule's `src` terms are matched against the nodes that compute them: each symbol against a
node of its op whose attributes are the symbol's (`AlgebraOp.matches`), each variable against
any value, consistently. The variables' concrete shapes must unify with the rule's symbolic
ones and every split must cut where the rule says, so a rule is applied only where it was
proved. Values inside the match may be read by nothing outside it. Applying builds `dst`'s
nodes (shared subterms once, the two parts of a split as one Split node), points every reader
of a matched output at its replacement and drops what is left unread.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from autosched.graph.ir import Graph, Node, Value
from autosched.graph.passes.dce import eliminate_dead_code
from autosched.graph.passes.rewrite import fresh_name, rebuild, rename_inputs
from autosched.graph.substitutions.rules import Rule
from autosched.graph.substitutions.terms import App, Dim, SymShape, Term, Var, subterms, symbol
from autosched.opset.registry import lookup


def directions(rules: Sequence[Rule]) -> list[Rule]:
    """Every rule forward, and backward (named with a trailing `~`) where dst reads every
    variable src reads."""
    out = list(rules)
    out += [Rule(f"{r.name}~", r.shapes, r.dst, r.src, r.proof) for r in rules if r.reversible]
    return out


@dataclass(frozen=True)
class Match:
    rule: Rule
    binding: Mapping[str, str]  # variable -> value name
    dims: Mapping[str, int]  # dimension symbol -> size
    nodes: tuple[Node, ...]  # the matched nodes
    roots: tuple[str, ...]  # the values src's outputs are


class Matcher:
    """Matches rules in one graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}
        self.position = {id(node): k for k, node in enumerate(graph.nodes)}
        self.by_op: dict[str, list[Node]] = {}
        for node in graph.nodes:
            self.by_op.setdefault(node.op.value, []).append(node)
        self._alone: dict[App, list[Node]] = {}
        self._below: dict[str, frozenset[str]] = {}

    def matches(self, rule: Rule) -> Iterator[Match]:
        yield from self._roots(rule, 0, {}, [], ())

    def _roots(self, rule: Rule, k: int, binding: dict[str, str], nodes: list[Node],
               roots: tuple[str, ...]) -> Iterator[Match]:
        if k == len(rule.src):
            match = self._finish(rule, binding, nodes, roots)
            if match is not None:
                yield match
            return
        term = rule.src[k]
        if not isinstance(term, App):
            return  # a bare variable is no pattern: it would match every value
        alg = symbol(term.op)
        for node in self._candidates(term, binding):
            if alg.output >= len(node.outputs):
                continue
            root = node.outputs[alg.output]
            if root in roots or (root in self.outputs and not isinstance(rule.dst[k], App)):
                continue  # a graph output keeps its name: only a node dst builds can take it
            b, found = dict(binding), list(nodes)
            if self._match(term, root, b, found) and (k + 1 == len(rule.src) or self._shapes_fit(rule, b)):
                yield from self._roots(rule, k + 1, b, found, (*roots, root))

    def _shapes_fit(self, rule: Rule, binding: Mapping[str, str]) -> bool:
        """Whether the variables bound so far can take the rule's symbolic shapes: checked
        before the next root is sought, since a first root of the wrong rank otherwise paired
        with every candidate of the second (`scale(a, b), scale(c, b)` tried 65,000 pairs on an
        LSTM's one shared scalar, each failing to unify at the end)."""
        shapes = {v: self.graph.values[name].shape for v, name in binding.items()}
        return unify(shapes, rule.shapes, partial=True) is not None

    def _candidates(self, term: App, binding: Mapping[str, str]) -> Iterator[Node]:
        """The nodes that may compute `term`: where it reads a variable an earlier root bound,
        only those reached upward from that value along the term's path to it, else every node
        of its op. Scanning every node for each root after the first made rules of two roots
        quadratic: `autosched tasks` spent 22 s matching in an unrolled LSTM of 1,200 nodes."""
        path = _bound_path(term, binding)
        if path is None:
            yield from self._matching_alone(term)
            return
        values, steps = {binding[path[0]]}, path[1]
        for sub, arg in reversed(steps):
            alg = symbol(sub.op)
            values = {reader.outputs[alg.output] for v in values for reader in self.consumers.get(v, ())
                      if reader.op is alg.op and alg.output < len(reader.outputs)
                      and arg < len(reader.inputs) and reader.inputs[arg] == v}
        yield from sorted({id(n): n for n in (self.producers[v] for v in values)}.values(),
                          key=lambda n: self.position[id(n)])  # graph order, as the scan: deterministic

    def _matching_alone(self, term: App) -> list[Node]:
        """The nodes of `term`'s op that match it with nothing bound, once per term: matching
        alone is necessary for matching under any binding, and a second root that reads no bound
        variable was otherwise tried against every node of its op for each first root (640² Mul
        pairs for `mul(a, b), mul(c, c)` in a bidirectional LSTM of 32 steps, 1 s a rule)."""
        if term not in self._alone:
            alg = symbol(term.op)
            self._alone[term] = [node for node in self.by_op.get(alg.op.value, ())
                                 if alg.output < len(node.outputs) and self._match(term, node.outputs[alg.output], {}, [])]
        return self._alone[term]

    def _match(self, term: Term, value: str, binding: dict[str, str], nodes: list[Node]) -> bool:
        if not isinstance(term, App):
            return binding.setdefault(term.name, value) == value
        node = self.producers.get(value)
        alg = symbol(term.op)
        if node is None or node.op is not alg.op or len(node.inputs) != alg.arity:
            return False
        if node.outputs.index(value) != alg.output:
            return False
        shapes = [self.graph.values[i].shape for i in node.inputs]
        size = None
        if alg.sized:
            parts = node.attrs.get("split", ())
            if len(parts) != 2:
                return False
            size = parts[0]
        if not alg.matches(node.attrs, shapes, size):
            return False
        if node not in nodes:
            nodes.append(node)
        return all(self._match(a, i, binding, nodes) for a, i in zip(term.args, node.inputs))

    def _finish(self, rule: Rule, binding: dict[str, str], nodes: list[Node],
                roots: tuple[str, ...]) -> Match | None:
        dims = unify({v: self.graph.values[name].shape for v, name in binding.items()}, rule.shapes)
        if dims is None or not _sizes_agree(rule.src, roots, self.producers, dims):
            return None
        inside = {id(n) for n in nodes}
        computed = {out for n in nodes for out in n.outputs}
        if any(v in computed for v in binding.values()):  # a variable must be an input of the match
            return None
        if len(roots) > 1 and self._after_a_root(binding.values(), roots) and any(
                v in self._downstream(r) for r in roots for v in binding.values()):
            return None  # dst would read a value computed from one of the outputs it replaces: a cycle
        for node in nodes:  # what the match computes besides its roots must be read only inside it
            for out in node.outputs:
                if out in roots:
                    continue
                if out in self.outputs or any(id(r) not in inside for r in self.consumers.get(out, ())):
                    return None
        return Match(rule, dict(binding), dims, tuple(nodes), roots)

    def _after_a_root(self, values: Iterable[str], roots: Sequence[str]) -> bool:
        """Whether a node after the first root's computes one of `values`: only then can one be
        computed from a root (nodes are in topological order), and the walk downstream is needed."""
        first = min(self.position[id(self.producers[r])] for r in roots)
        return any(v in self.producers and self.position[id(self.producers[v])] > first for v in values)

    def _downstream(self, root: str) -> frozenset[str]:
        """Every value computed from `root`, once per root: a recurrence's steps each reach
        the rest of the graph, and pairs of them were walked again for each binding."""
        if root not in self._below:
            seen: set[str] = set()
            todo = [root]
            while todo:
                for reader in self.consumers.get(todo.pop(), ()):
                    for out in reader.outputs:
                        if out not in seen:
                            seen.add(out)
                            todo.append(out)
            self._below[root] = frozenset(seen)
        return self._below[root]


def _bound_path(term: App, binding: Mapping[str, str]) -> tuple[str, list[tuple[App, int]]] | None:
    """The first variable of `term` that `binding` holds, with the path to it: (subterm, argument
    position) from the root down; None where the term reads no bound variable."""
    for k, arg in enumerate(term.args):
        if isinstance(arg, Var):
            if arg.name in binding:
                return arg.name, [(term, k)]
        elif isinstance(arg, App):
            found = _bound_path(arg, binding)
            if found is not None:
                return found[0], [(term, k), *found[1]]
    return None


def unify(shapes: Mapping[str, tuple[int, ...]], symbolic: Mapping[str, SymShape],
          partial: bool = False) -> dict[str, int] | None:
    """Sizes of the dimension symbols that make the symbolic shapes the concrete ones, or None.
    With `partial`, `shapes` are some of the variables': a dimension that reads a symbol they
    do not fix is left for the rest to decide."""
    dims: dict[str, int] = {}
    pending: list[tuple[Dim, int]] = []
    for v, shape in shapes.items():
        rule_shape = symbolic[v]
        if len(rule_shape) != len(shape):
            return None
        for d, n in zip(rule_shape, shape):
            if d.symbol is not None:
                if dims.setdefault(d.symbol, n) != n:
                    return None
            else:
                pending.append((d, n))
    for d, n in pending:
        if any(s not in dims for s in d.symbols):
            if partial:
                continue
            return None
        if d.value(dims) != n:
            return None
    return dims


def _sizes_agree(terms: Sequence[Term], roots: Sequence[str], producers: Mapping[str, Node],
                 dims: Mapping[str, int]) -> bool:
    """Every split of the match cuts where the rule's symbolic size says."""
    def walk(term: Term, value: str) -> bool:
        if not isinstance(term, App):
            return True
        node = producers[value]
        if term.size is not None:
            if any(s not in dims for s in term.size.symbols) or term.size.value(dims) != node.attrs["split"][0]:
                return False
        return all(walk(a, i) for a, i in zip(term.args, node.inputs))

    return all(walk(t, root) for t, root in zip(terms, roots))


def apply(graph: Graph, match: Match) -> Graph:
    """`graph` with `match`'s src replaced by its rule's dst."""
    taken = set(graph.values) | {n.name for n in graph.nodes}
    made: dict[Term, str] = {}
    new_nodes: list[Node] = []
    known = dict(graph.values)
    new_values: list[Value] = []
    splits: dict[tuple[str, int, int], Node] = {}

    def build(term: Term) -> str:
        if not isinstance(term, App):
            return match.binding[term.name]
        if term in made:
            return made[term]
        args = [build(a) for a in term.args]
        alg = symbol(term.op)
        size = term.size.value(match.dims) if term.size is not None else None
        shapes = [known[a].shape for a in args]
        key = (args[0], alg.axis or 0, size or 0)
        if alg.sized and key in splits:
            node = splits[key]
        else:
            name = fresh_name(f"{match.rule.name.rstrip('~')}/{alg.op.value}", taken)
            taken.add(name)
            count = 2 if alg.sized else 1
            outs = tuple(f"{name}:{i}" for i in range(count)) if count > 1 else (name,)
            taken.update(outs)
            node = Node(name, alg.op, tuple(args), outs, alg.attrs(shapes, size))
            inferred = lookup(alg.op).shape(node, [known[a] for a in args])
            for out, (s, d) in zip(outs, inferred):
                known[out] = Value(out, s, d)
                new_values.append(known[out])
            new_nodes.append(node)
            if alg.sized:
                splits[key] = node
        made[term] = node.outputs[alg.output]
        return made[term]

    replacement = {root: build(term) for root, term in zip(match.roots, match.rule.dst)}
    outputs = {v.name for v in graph.outputs}
    # a graph output's new producer writes it under its old name (its old producer is gone)
    renamed = {new: root for root, new in replacement.items() if root in outputs}
    new_nodes = [_rename_outputs(rename_inputs(n, renamed), renamed) for n in new_nodes]
    new_values = [Value(renamed.get(v.name, v.name), v.shape, v.dtype) for v in new_values]
    replacement = {root: renamed.get(new, new) for root, new in replacement.items()}
    removed = {id(n) for n in match.nodes}
    kept = [rename_inputs(n, replacement) for n in graph.nodes if id(n) not in removed]
    return eliminate_dead_code(rebuild(graph, [*kept, *new_nodes], new_values=new_values))


def _rename_outputs(node: Node, mapping: Mapping[str, str]) -> Node:
    if not any(out in mapping for out in node.outputs):
        return node
    return Node(node.name, node.op, node.inputs, tuple(mapping.get(o, o) for o in node.outputs), node.attrs)


def growth(graph: Graph, match: Match) -> int:
    """How many more nodes computing on activations the rewrite leaves than it removes (negative:
    it shrinks the graph). Operators on constants only (a kernel enlarged, two kernels
    concatenated) fold away at build time and do not count. The search tries the most
    shrinking rewrites first."""
    def runtime(term: Term) -> bool:
        return any(isinstance(t, Var) and match.binding[t.name] not in graph.constants for t in subterms(term))

    made = {t for d in match.rule.dst for t in subterms(d) if isinstance(t, App) and runtime(t)}
    return len(made) - len(match.nodes)
