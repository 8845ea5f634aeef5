"""The Python client's overhead per call, against a bare call.

    cd clientlib/python && /usr/bin/python3 bench.py      # or: make bench-python

Starts a coordinator (embedded etcd) and one agent built from this tree
(tests/harness.py), connects a client, and times, interleaved in each of
--runs rounds: the attempt function called directly ("bare"), the same
function through Dependency.call deciding from the pushed snapshot
("session": decision and outcome counted in process, deltas sent by the
background thread), and through Dependency.call(strict=True) ("check": a
Check RPC to the agent over its unix socket before each call). It prints
the medians per call of the wall time, of the calling thread's CPU time and
of the whole process's CPU time (the client's flusher and session threads
and gRPC's included; the agent's work is not), and the overhead over bare,
with the load average before and after, as a Markdown table. On a shared
machine the CPU times are the figures to compare: wall time there mostly
measures waiting for a core.
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
    """Per call: (wall seconds, CPU seconds of this thread, CPU seconds of
    the process: the client's own threads and gRPC's included)."""
    w, t, p = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(n):
        f()
    return ((time.perf_counter() - w) / n, (time.thread_time() - t) / n, (time.process_time() - p) / n)


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

    med = {k: [statistics.median(r[i] for r in v) * 1e6 for i in range(3)] for k, v in res.items()}
    b = med["bare"]
    print("| path | wall per call | CPU per call, calling thread | CPU per call, process | overhead (process CPU) |")
    print("| --- | --- | --- | --- | --- |")
    for k, label in (("bare", "bare call"), ("session", "session (pushed snapshot)"), ("check", "check (Check RPC per call)")):
        m = med[k]
        over = "—" if k == "bare" else "+%.1f µs" % (m[2] - b[2])
        print("| %s | %.2f µs | %.2f µs | %.2f µs | %s |" % (label, m[0], m[1], m[2], over))
    print()
    print("medians of %d runs of %d calls (check: %d)" % (a.runs, a.calls, a.check_calls))
    for k, v in res.items():
        print("%s process CPU per call, each run (µs): %s" % (k, " ".join("%.2f" % (r[2] * 1e6) for r in v)))
    print("Check answered locally (agent too slow): %d" % fallbacks)
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f; %d CPUs; Python %s; grpcio %s" % (
        *load_before, *load_after, os.cpu_count(), platform.python_version(), grpc.__version__))


if __name__ == "__main__":
    main()
