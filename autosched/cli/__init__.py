"""The `autosched` command line: one module per group of subcommands, wired in `app`.

`args` holds the arguments several subcommands share; `model` the verbs on one model (tasks,
build, run, check, bench, report), `tune` the tuning run, `db` the database verbs, `fleet` the Ray
fleet's; `progress` and `report` are what tune and report show.
"""
from autosched.cli.app import main

__all__ = ["main"]
