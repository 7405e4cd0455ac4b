"""The tuning callback that makes the database the store of record: every measured batch is
committed as it is measured, in one transaction, so a kill -9 loses only the batch in flight."""
from __future__ import annotations

import time
from collections.abc import Sequence

from autosched.database.store import Database
from autosched.measure import MeasureInput, MeasureResult

#: the `tuner` of the records of defaults re-timed beside a round
REFERENCE_TUNER = "reference"


class RecordWriter:
    """A `Callback` committing each batch to `db` under `session`."""

    def __init__(self, db: Database, session: int | None = None, tuner: str | None = None) -> None:
        self.db, self.session, self.tuner = db, session, tuner
        self.written = 0
        self.seconds = 0.0  # spent committing: the database's share of the tuning time

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        start = time.perf_counter()
        self.written += self.db.commit(list(zip(inputs, results)), self.session, self.tuner)
        self.seconds += time.perf_counter() - start

    def reference(self, inp: MeasureInput, res: MeasureResult) -> None:
        """A task's default re-timed beside a round (`task_scheduler`): recorded, not a trial."""
        start = time.perf_counter()
        self.db.commit([(inp, res)], self.session, REFERENCE_TUNER, trials=False)
        self.seconds += time.perf_counter() - start

    def searched(self, seconds: float) -> None:
        """A round's search time (cost model fits, proposals) counts toward its session."""
        if self.session is not None:
            self.db.add_search_time(self.session, seconds)
