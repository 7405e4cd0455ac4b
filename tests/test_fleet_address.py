"""A wrong fleet address is reported as one, whatever this machine's auth token."""
import os
import socket
import subprocess
import sys

import pytest
from process_helpers import ROOT

pytest.importorskip("ray")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once closed: nothing listens there


# the closed port is chosen when the case runs: test ids must be the same in every collection
# (pytest-xdist's workers each collect the suite and compare)
@pytest.mark.parametrize("address, said", [("127.0.0.1:{port}", "no Ray head answers at 127.0.0.1:"),
                                           ("head-without-port", "is not a Ray head's HOST:PORT")])
def test_a_bad_fleet_address_is_not_reported_as_a_missing_token(small_model, tmp_path, address, said):
    address = address.format(port=_closed_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_TOKEN")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT))  # no ~/.ray/auth_token either
    db = tmp_path / "t.db"
    out = subprocess.run([sys.executable, "-m", "autosched.cli", "tune", str(small_model), "--trials", "4",
                          "--db", str(db), "--ray-address", address], capture_output=True, text=True, env=env)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and said in out.stderr and "token" not in out.stderr, out.stderr
    assert not db.exists()
