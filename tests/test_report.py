"""`autosched report`: one self-contained HTML file with its figures embedded."""
import re
import shutil

import onnx
from db_helpers import measured

import autosched
from autosched.cli import main
from autosched.database import Database
from autosched.target import Target
from autosched.zoo import mlp


def test_report_embeds_four_figures_and_the_task_table(tmp_path, tasks, capsys):
    host = Target.parse("llvm")
    db, model, out = tmp_path / "t.db", tmp_path / "mlp.onnx", tmp_path / "report.html"
    onnx.save(mlp(), model)
    with Database(db) as database:
        database.commit(measured(tasks[0], host, [3e-3, None, 1e-3]))
        database.commit(measured(tasks[1], host, [2e-3], t0=5000.0))
        session = database.start_session(str(model), host, 4)
        database.add_search_time(session, 1.25)
        database.add_search_time(session, 0.5)
    assert main(["report", str(model), "--db", str(db), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (4 records)\n"
    page = out.read_text()
    assert page.count('<img src="data:image/png;base64,') == 4
    tasks_table = page[page.index("<h2>Tasks</h2>"):]
    assert tasks_table.count("<tr>") == 3  # header and the two tasks with records
    # the third task's shipped record counts where this ISA has one (it is not timed here)
    assert re.search(r"<h2>Latency model</h2><p>estimate 3(\.0\d*)? ms = records scaled to the model 3(\.0\d*)? "
                     r"\(alone 3(\.0\d*)?\) \+ other kernels in the model 0 \+ executor 0( \(1 tasks never timed\))?; "
                     r"no build of this model was timed here yet", page)
    assert "cost model and search (tuners): 1.8 s" in page
    assert "<p>substitutions: none lowers the estimated cost; " in page  # what the graph optimizer did
    assert "<td>Gemm</td><td>[[64, 784], [1024, 784], [1024]]</td><td>1</td><td>3</td><td>1</td><td>1</td>" in page


def test_report_without_records_is_one_error_line(tmp_path, capsys):
    db = tmp_path / "empty.db"
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {db}: no records for all workloads on this machine")


def test_a_copy_of_a_tuned_model_reports_the_sessions_that_tuned_it(small_model, tmp_path, capsys):
    """Sessions are matched by the model's tasks, not by the path it was tuned from."""
    db = tmp_path / "t.db"
    autosched.tune(small_model, "llvm", 4, db=db, tuner="random", round_trials=4)
    copy = tmp_path / "elsewhere" / "renamed.onnx"
    copy.parent.mkdir()
    shutil.copy(small_model, copy)
    assert main(["report", str(copy), "--db", str(db), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    wall = re.search(r"wall time: ([0-9.]+) s", page)
    assert float(wall.group(1)) > 0
    assert "last timed build here " in page  # the tune's model check timed it
