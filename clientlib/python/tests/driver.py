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

--serve keeps one client for many commands, so that a runner makes many
calls without starting Python again: it reads one JSON object a line on
stdin and answers each with one JSON line on stdout, in order, until
{"op": "quit"} or the end of stdin (then it closes the client, which
sends the last counts, and exits 0). Commands:

    {"op": "status", "dependency": "D"}
        -> {"status": {...Status...}, "agent_connected": true}
        (the first one makes the handle, which subscribes to D's snapshots)
    {"op": "calls", "method": "GET", "url": "http://h:p/x", "n": 10,
     "concurrency": 2, "interval": 0.02, "timeout": 5.0,
     "headers": {"K": "V"}, "call_header": "X-Call",
     "call_prefix": "py-1", "key_prefix": "k-1"}
        -> {"ok": 9, "failed": 0, "errors": 0, "rejected": {"open": 1},
            "errs": []}
        (HTTP requests through the requests adapter, concurrency threads
        each pausing interval seconds between its calls; call i carries
        call_header: call_prefix-i when both are given, and
        Idempotency-Key: key_prefix-i when key_prefix is; "ok" counts
        answers below 500, "failed" those of 500 and more, "rejected"
        the calls Fusebox refused before any attempt, by reason, "errors"
        the calls that got no answer: deadline passed, connection failed;
        "errs" the first 5 of their messages)
    {"op": "quit"} -> {"ok": true}

A command that cannot be run is answered {"error": "..."}.
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
    ap.add_argument("--agent-wait", type=float, default=None,
                    help="the client's bound on each question to the agent, seconds (default the client's, 0.05)")
    ap.add_argument("--serve", action="store_true", help="read commands on stdin, answer JSON lines (see above)")
    a = ap.parse_args(argv)
    if a.serve:
        return serve(a, sys.stdin, sys.stdout)
    if a.url is None and a.dependency is None:
        ap.error("give --url or --dependency")
    if a.calls < 0 or a.concurrency < 1:
        ap.error("--calls must be >= 0 and --concurrency >= 1")

    client = new_client(a)
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


def new_client(a):
    kw = {}
    if a.agent_wait is not None:
        kw["agent_wait"] = a.agent_wait
    return fusebox.Client(a.agent, service=a.service, no_agent=a.no_agent, **kw)


def serve(a, stdin, stdout):
    """The --serve loop: one client, commands in, answers out."""
    import requests
    from fusebox.requests_adapter import FuseboxAdapter

    client = new_client(a)
    session = requests.Session()
    adapter = FuseboxAdapter(client)
    session.mount("http://", adapter)
    try:
        for line in stdin:
            line = line.strip()
            if not line:
                continue
            op = None
            try:
                cmd = json.loads(line)
                op = cmd.get("op")
                if op == "quit":
                    answer = {"ok": True}
                elif op == "status":
                    dep = client.dependency(cmd["dependency"])
                    answer = {"status": dataclasses.asdict(dep.status()), "agent_connected": client.agent_connected}
                elif op == "calls":
                    answer = serve_calls(session, cmd)
                else:
                    answer = {"error": "unknown op %r: want status, calls or quit" % (op,)}
            except Exception as e:  # a bad command is answered, never fatal
                answer = {"error": "%s: %s" % (type(e).__name__, e)}
            stdout.write(json.dumps(answer) + "\n")
            stdout.flush()
            if op == "quit":
                break
    finally:
        session.close()
        client.close()
    return 0


def serve_calls(session, cmd):
    """Make cmd's HTTP calls and tally them (see --serve)."""
    import requests

    n, conc = int(cmd.get("n", 1)), int(cmd.get("concurrency", 1))
    interval = float(cmd.get("interval") or 0)
    if n < 0 or conc < 1 or interval < 0:
        raise ValueError("n must be >= 0, concurrency >= 1 and interval >= 0")
    method, url = cmd.get("method", "GET"), cmd["url"]
    timeout = cmd.get("timeout")
    base = dict(cmd.get("headers") or {})
    call_header, call_prefix = cmd.get("call_header"), cmd.get("call_prefix")
    key_prefix = cmd.get("key_prefix")
    out = {"ok": 0, "failed": 0, "errors": 0, "rejected": {}, "errs": []}
    mu = threading.Lock()
    nxt = [0]

    def worker():
        first = True
        while True:
            with mu:
                if nxt[0] >= n:
                    return
                i = nxt[0]
                nxt[0] += 1
            if interval and not first:
                time.sleep(interval)
            first = False
            h = dict(base)
            if call_header and call_prefix:
                h[call_header] = "%s-%d" % (call_prefix, i)
            if key_prefix:
                h["Idempotency-Key"] = "%s-%d" % (key_prefix, i)
            try:
                r = session.request(method, url, headers=h, timeout=timeout)
                res = "ok" if r.status_code < 500 else "failed"
                r.close()
            except fusebox.RejectedError as e:
                with mu:
                    out["rejected"][e.reason] = out["rejected"].get(e.reason, 0) + 1
                continue
            except (fusebox.DeadlineExceeded, requests.RequestException) as e:
                res = "errors"
                with mu:
                    if len(out["errs"]) < 5:
                        out["errs"].append("%s: %s" % (type(e).__name__, e))
            with mu:
                out[res] += 1

    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


if __name__ == "__main__":
    sys.exit(main())
