"""Make N calls through the Python client and print what happened as JSON.

For scenario runners (a Go test, a conformance suite) that drive the
Python client as a subprocess against a real agent:

    /usr/bin/python3 clientlib/python/tests/driver.py \\
        --agent unix:///tmp/x/agent.sock --url http://127.0.0.1:8080/ --calls 100

--url makes each call an HTTP request through the requests adapter
(dependency named after host:port unless --dependency is given);
without it, --dependency names the dependency and --behaviour (ok, fail,
timeout) what each attempt does in process. It waits (--wait-agent
seconds, default 10) until the agent's snapshot decides, then makes the
calls (--concurrency threads), closes the client (which sends the last
counts) and prints one JSON object:

    {"calls": 100, "ok": 97, "rejected": {"open": 3}, "failed": 0,
     "deadline": 0, "attempts": 99, "status": {...}, "stats": {...},
     "agent_connected": true, "elapsed_s": 0.8}

"attempts" counts attempt functions run (for --url: requests sent);
"failed" the calls that raised the attempt's own error. Exit status 0,
or 2 for bad arguments.
"""

import argparse
import dataclasses
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fusebox  # noqa: E402

CLASSES = {c.value: c for c in fusebox.Idempotency}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", help="agent address (default $FUSEBOX_AGENT)")
    ap.add_argument("--no-agent", action="store_true", help="local decisions only")
    ap.add_argument("--service", default="pydriver")
    ap.add_argument("--dependency", help="dependency name (default for --url: host:port)")
    ap.add_argument("--url", help="make HTTP requests to this URL through the requests adapter")
    ap.add_argument("--method", default="GET")
    ap.add_argument("--behaviour", default="ok", choices=["ok", "fail", "timeout"],
                    help="without --url: what each attempt does")
    ap.add_argument("--idempotency", choices=sorted(CLASSES),
                    help="the call's class (default: idempotent; for --url: from the method)")
    ap.add_argument("--key", help="Idempotency-Key of every call (--url: sent as the header)")
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=None, help="each call's deadline, seconds")
    ap.add_argument("--max-attempts", type=int, default=None)
    ap.add_argument("--strict", action="store_true", help="ask the agent (Check) before each first attempt")
    ap.add_argument("--wait-agent", type=float, default=10.0,
                    help="seconds to wait for the agent's snapshot before calling (0: do not wait)")
    a = ap.parse_args(argv)
    if a.url is None and a.dependency is None:
        ap.error("give --url or --dependency")
    if a.calls < 0 or a.concurrency < 1:
        ap.error("--calls must be >= 0 and --concurrency >= 1")

    client = fusebox.Client(a.agent, service=a.service, no_agent=a.no_agent)
    counts = {"calls": 0, "ok": 0, "rejected": {}, "failed": 0, "deadline": 0, "attempts": 0}
    mu = threading.Lock()
    opts = {}
    if a.timeout is not None:
        opts["timeout"] = a.timeout
    if a.max_attempts is not None:
        opts["max_attempts"] = a.max_attempts
    if a.strict:
        opts["strict"] = True

    if a.url is not None:
        import requests
        import requests.adapters
        from fusebox.requests_adapter import FuseboxAdapter

        class Sent(requests.adapters.HTTPAdapter):
            def send(self, *args, **kwargs):  # each attempt's request
                with mu:
                    counts["attempts"] += 1
                return super().send(*args, **kwargs)

        class Adapter(FuseboxAdapter, Sent):
            pass

        adapter = Adapter(client, dependency=a.dependency, call_options=opts,
                          idempotency=CLASSES[a.idempotency] if a.idempotency else None)
        session = requests.Session()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        dep = client.dependency(adapter.dependency_name(requests.Request(a.method, a.url).prepare()))
        headers = {"Idempotency-Key": a.key} if a.key else {}

        def one():
            r = session.request(a.method, a.url, headers=headers, timeout=a.timeout)
            return "ok" if r.status_code < 500 else "failed"
    else:
        dep = client.dependency(a.dependency)
        cls = CLASSES[a.idempotency] if a.idempotency else fusebox.IDEMPOTENT
        if a.key:
            opts["idempotency_key"] = a.key

        def attempt(at):
            with mu:
                counts["attempts"] += 1
            if a.behaviour == "fail":
                raise ConnectionRefusedError("driver: the dependency is down")
            if a.behaviour == "timeout":
                time.sleep(at.timeout if at.timeout is not None else 0.1)
                raise TimeoutError("driver: no answer")
            return True

        def one():
            dep.call(attempt, cls, **opts)
            return "ok"

    if a.wait_agent > 0 and not a.no_agent:
        end = time.monotonic() + a.wait_agent
        while not dep.status().from_agent and time.monotonic() < end:
            time.sleep(0.01)

    left = [a.calls]

    def worker():
        while True:
            with mu:
                if left[0] <= 0:
                    return
                left[0] -= 1
                counts["calls"] += 1
            try:
                res = one()
            except fusebox.RejectedError as e:
                with mu:
                    counts["rejected"][e.reason] = counts["rejected"].get(e.reason, 0) + 1
                continue
            except fusebox.DeadlineExceeded:
                res = "deadline"
            except Exception:
                res = "failed"
            with mu:
                counts[res] += 1

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts["elapsed_s"] = round(time.monotonic() - start, 3)
    counts["status"] = dataclasses.asdict(dep.status())
    counts["stats"] = dep.stats()
    counts["agent_connected"] = client.agent_connected
    client.close()
    json.dump(counts, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
