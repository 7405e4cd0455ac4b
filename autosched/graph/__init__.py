"""The graph IR, its numpy reference evaluator, and the passes over it."""
