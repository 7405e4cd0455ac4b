"""Graph substitutions generated, verified and searched, after TASO (SOSP'19).

`terms.py` (the algebra's terms and symbolic shapes; the symbols themselves live in the op
records, `opset/algebra.py`), `evaluate.py` (terms through the numpy references),
`properties.py` (the operator properties), `verify.py` (z3 proofs), `generate.py`
(enumeration, fingerprints, pruning), `rules.py` (the rule file; `rules.json` ships), `apply.py`
(rules matched and applied in a graph). The search is `graph/passes/substitute.py`; running it
on a model against the target's costs is `autosched/substitution.py`.
"""
from autosched.graph.substitutions.rules import SHIPPED, Rule, RuleFile, RuleFileError, load_rules, save_rules

__all__ = ["SHIPPED", "Rule", "RuleFile", "RuleFileError", "load_rules", "save_rules"]
