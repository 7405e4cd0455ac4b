"""`autosched fleet`: start, inspect and stop the Ray nodes that build and measure candidates."""
from __future__ import annotations

import argparse
import json

from autosched import fleet


def fleet_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="fleet_action", metavar="ACTION", required=True)
    head = actions.add_parser("head", help="start a head node here (it also offers this machine's devices)")
    head.add_argument("--port", type=int, default=6379)
    head.add_argument("--host", default="127.0.0.1",
                      help="address the head is reached at (default: loopback; Ray 2.60 still listens on every "
                           "interface, the token keeps the fleet closed: see the README)")
    worker = actions.add_parser("worker", help="start a node here with its devices detected, joined to a head")
    worker.add_argument("--address", required=True, metavar="HOST:PORT")
    worker.add_argument("--host", default=None, help="address this node advertises (default: Ray's choice)")
    status = actions.add_parser("status", help="nodes, their device resources and what each is measuring")
    status.add_argument("--address", default="auto", metavar="auto|HOST:PORT")
    status.add_argument("--json", action="store_true", help="one JSON object with a 'nodes' list")
    actions.add_parser("stop", help="stop the nodes 'fleet head/worker' started on this machine")


def run_fleet(args: argparse.Namespace) -> int:
    if args.fleet_action in ("head", "worker"):
        node = (fleet.start_head(args.port, args.host) if args.fleet_action == "head"
                else fleet.start_worker(args.address, args.host))
        print(f"{node.role} started (pid {node.pid}, log {node.log}), fleet at {node.address}")
        print(f"resources: {json.dumps(node.resources, sort_keys=True)}")
        if node.role == "head":
            print(f"join with: autosched fleet worker --address {node.address}  (token auth is on: workers and "
                  "drivers need this machine's ~/.ray/auth_token or RAY_AUTH_TOKEN)")
    elif args.fleet_action == "status":
        fleet.connect(args.address)
        status = fleet.fleet_status()
        fleet.disconnect()
        print(json.dumps(status, indent=1, sort_keys=True) if args.json else fleet.format_status(status))
    else:
        stopped = fleet.stop_nodes()
        print("\n".join(f"stopped {n.role} pid {n.pid} ({n.address})" for n in stopped) or "no fleet node runs here")
    return 0

