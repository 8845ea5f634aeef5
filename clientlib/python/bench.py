"""The Python client's overhead per call, against a bare call.

    cd clientlib/python && /usr/bin/python3 bench.py      # or: make bench-python

Starts a coordinator (embedded etcd) and one agent built from this tree
(tests/harness.py), connects a client, and times, interleaved in each of
--runs rounds: the attempt function called directly ("bare"), the same
function through Dependency.call deciding from the pushed snapshot
("session": decision and outcome counted in process, deltas sent by the
background thread), and through Dependency.call(strict=True) ("check": a
Check RPC to the agent over its unix socket before each call). It prints
the medians per call and the overhead over bare, with the load average
before and after, as a Markdown table.
"""

import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import fusebox  # noqa: E402
from tests import harness  # noqa: E402


def timed(n, f):
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000, help="calls per run (bare and session)")
    ap.add_argument("--check-calls", type=int, default=2000, help="calls per run (check)")
    a = ap.parse_args()

    load_before = os.getloadavg()
    with harness.Fleet() as fleet:
        agent = fleet.agent("bench")
        with fusebox.Client(agent.address, service="bench") as client:
            dep = client.dependency("bench-dep")
            harness.eventually(lambda: dep.status().from_agent, 10, "the agent's snapshot")

            def fn(attempt):
                return 1

            def bare():
                fn(None)

            def session():
                dep.call(fn, fusebox.IDEMPOTENT)

            def check():
                dep.call(fn, fusebox.IDEMPOTENT, strict=True)

            for f, n in ((bare, 2000), (session, 2000), (check, 200)):  # warm up
                timed(n, f)
            res = {"bare": [], "session": [], "check": []}
            for _ in range(a.runs):
                res["bare"].append(timed(a.calls, bare))
                res["session"].append(timed(a.calls, session))
                res["check"].append(timed(a.check_calls, check))
            fallbacks = client._session.fallbacks["check"]
            harness.eventually(lambda: agent.window("bench-dep", "successes") > 0, 10, "the agent to count the calls")
    load_after = os.getloadavg()

    med = {k: statistics.median(v) * 1e6 for k, v in res.items()}
    print("| path | per call (median of %d runs) | overhead over bare |" % a.runs)
    print("| --- | --- | --- |")
    print("| bare call | %.2f µs | — |" % med["bare"])
    print("| session (pushed snapshot) | %.2f µs | +%.2f µs |" % (med["session"], med["session"] - med["bare"]))
    print("| check (Check RPC per call) | %.1f µs | +%.1f µs |" % (med["check"], med["check"] - med["bare"]))
    print()
    for k, v in res.items():
        print("%s runs (µs): %s" % (k, " ".join("%.2f" % (x * 1e6) for x in v)))
    print("Check answered locally (agent too slow): %d" % fallbacks)
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f; %d CPUs; Python %s; grpcio %s" % (
        *load_before, *load_after, os.cpu_count(), platform.python_version(), grpc.__version__))


if __name__ == "__main__":
    main()
