"""Errors that autosched reports to its user.

Every error a user can cause (a bad model file, an unsupported op, a malformed
graph) derives from `AutoschedError`, so the command line can print it as one
short line and keep tracebacks for real bugs.
"""


class AutoschedError(Exception):
    """Base of all errors caused by the user's input rather than by a bug."""


class GraphError(AutoschedError):
    """A graph is malformed: a cycle, a value nobody produces, a shape mismatch."""


class FrontendError(AutoschedError):
    """A model file cannot be imported; the message names the file and node."""


class TuneInterrupted(KeyboardInterrupt):
    """Ctrl-C during `autosched.tune`: what was measured is kept and a rerun resumes from it."""

    def __init__(self, kept: int, database: str) -> None:
        super().__init__(f"{kept} records kept in {database}")
        self.kept, self.database = kept, database
