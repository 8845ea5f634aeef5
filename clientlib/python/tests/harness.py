"""Real Fusebox parts for the Python client's tests and benchmarks.

Fleet starts a coordinator with its embedded etcd and real agents built
from this tree (go build, once per process, into a temporary directory;
FUSEBOX_TEST_BIN names a directory of prebuilt binaries instead), each on
127.0.0.1 port 0 and a unix socket in a temporary directory. fuseboxctl
talks to the coordinator. DependencyServer is an HTTP dependency whose
behaviour a test sets. Nothing leaves loopback.

The processes get SIGKILL when the test process dies (PR_SET_PDEATHSIG),
and Fleet.close() stops them.
"""

import atexit
import contextlib
import ctypes
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PY_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PY_ROOT))
# name -> (the folder of the Go module holding it, its package there): the
# daemons and fuseboxctl are in the cmd module, gocaller in the root module.
BINARIES = {
    "fusebox-agent": ("cmd", "./fusebox-agent"),
    "fusebox-coordinator": ("cmd", "./fusebox-coordinator"),
    "fuseboxctl": ("cmd", "./fuseboxctl"),
    "gocaller": (".", "./clientlib/python/tests/testdata/gocaller"),
}

_bin_lock = threading.Lock()
_bin_dir = None


def eventually(cond, timeout, what, interval=0.01):
    """Poll cond until it returns a true value (returned) or timeout
    seconds pass (AssertionError naming what)."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))
        time.sleep(interval)


def binaries():
    """The directory holding the binaries, built on first use."""
    global _bin_dir
    with _bin_lock:
        if _bin_dir is not None:
            return _bin_dir
        pre = os.environ.get("FUSEBOX_TEST_BIN")
        if pre:
            missing = [b for b in BINARIES if not os.path.exists(os.path.join(pre, b))]
            if missing:
                raise RuntimeError("FUSEBOX_TEST_BIN=%s lacks %s" % (pre, ", ".join(missing)))
            _bin_dir = pre
            return pre
        d = tempfile.mkdtemp(prefix="fusebox-pytest-bin-")
        atexit.register(shutil.rmtree, d, True)
        go = os.environ.get("GO") or shutil.which("go")
        if not go:
            raise RuntimeError("the Python client's tests build the agent from this tree and need go on PATH (or FUSEBOX_TEST_BIN)")
        for mod in sorted({m for m, _ in BINARIES.values()}):
            cmd = [go, "build", "-o", d + os.sep] + [p for m, p in BINARIES.values() if m == mod]
            r = subprocess.run(cmd, cwd=os.path.join(REPO, mod), capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                raise RuntimeError("%s (in %s) failed:\n%s%s" % (" ".join(cmd), mod, r.stdout, r.stderr))
        _bin_dir = d
        return d


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: the child gets SIGKILL when this process dies.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def _terminate(proc):
    """SIGTERM, then SIGKILL when it takes more than 15 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _json_lines(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in data.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _find(path, msg, key, proc, timeout=30):
    def look():
        for rec in _json_lines(path):
            if rec.get("msg", "").startswith(msg) and rec.get(key):
                return rec[key]
        if proc.poll() is not None:
            with open(path, errors="replace") as f:
                raise RuntimeError("process exited (%s) before logging %r:\n%s" % (proc.returncode, msg, f.read()[-4000:]))
        return None
    return eventually(look, timeout, "%r in %s" % (msg, path), interval=0.02)


class Agent:
    def __init__(self, fleet, name, zone):
        self.fleet, self.name, self.zone = fleet, name, zone
        self.dir = os.path.join(fleet.dir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "agent.sock")
        self.address = "unix://" + self.socket
        self.proc = None
        self.http = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = os.path.join(self.dir, "agent-%d.log" % self.starts)
        args = [os.path.join(self.fleet.bins, "fusebox-agent"), "--name", self.name, "--zone", self.zone,
                "--etcd", self.fleet.etcd, "--socket", self.socket, "--gossip-addr", "127.0.0.1:0",
                "--http-addr", "127.0.0.1:0", "--data-dir", os.path.join(self.dir, "data"),
                "--log-format", "json", "--log-level", "info"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self.http = _find(log, "agent started", "http", self.proc)
        _find(log, "policies synced from etcd", "msg", self.proc)
        eventually(lambda: os.path.exists(self.socket), 10, "the socket of " + self.name)
        return self

    def kill(self):
        """SIGKILL: the agent is gone at once, its socket left behind."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        if self.proc is not None:
            _terminate(self.proc)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def metrics(self):
        """The agent's /metrics as {(name, frozenset(labels)): value}."""
        with urllib.request.urlopen("http://%s/metrics" % self.http, timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            name, _, labels = series.partition("{")
            lab = frozenset(tuple(kv.split("=", 1)) for kv in _split_labels(labels.rstrip("}")))
            out[(name, lab)] = float(value)
        return out

    def metric(self, name, **labels):
        want = frozenset((k, '"%s"' % v) for k, v in labels.items())
        for (n, lab), v in self.metrics().items():
            if n == name and want <= lab:
                return v
        return None

    def window(self, dependency, kind, scope="local"):
        """fusebox_agent_<scope>_calls_total{dependency, kind}: the calls
        this node's clients reported ("local") or the fleet's, counted
        since the agent began tracking the dependency."""
        return self.metric("fusebox_agent_%s_calls_total" % scope, dependency=dependency, kind=kind) or 0

    def breaker_open(self, dependency):
        return self.metric("fusebox_agent_breaker_state", dependency=dependency, state="open") == 1


def _split_labels(s):
    out, cur, q = [], "", False
    for ch in s:
        if ch == '"':
            q = not q
        if ch == "," and not q:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


class Fleet:
    """A coordinator (embedded etcd) and agents on loopback, in a temporary
    directory. Use as a context manager, or call close()."""

    def __init__(self, policies=None):
        self.bins = binaries()
        self.dir = tempfile.mkdtemp(prefix="fusebox-pytest-")
        self.agents = []
        log = os.path.join(self.dir, "coordinator.log")
        args = [os.path.join(self.bins, "fusebox-coordinator"), "--name", "coordinator-" + os.path.basename(self.dir),
                "--data-dir", os.path.join(self.dir, "etcd"), "--embedded-etcd-url", "http://127.0.0.1:0",
                "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
                "--log-format", "json"]
        with open(log, "wb") as out:
            self.coordinator = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        try:
            self.etcd = _find(log, "embedded etcd ready", "etcd", self.coordinator)
            self.grpc = _find(log, "coordinator serving", "grpc_addr", self.coordinator)
            for name, pol in (policies or {}).items():
                self.set_policy(name, pol)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def agent(self, name, zone="default"):
        a = Agent(self, name, zone).start()
        self.agents.append(a)
        return a

    def ctl(self, *args, stdin=None, check=True):
        """Run fuseboxctl against the coordinator; its JSON output parsed."""
        cmd = [os.path.join(self.bins, "fuseboxctl"), "--coordinator", self.grpc, "-o", "json"] + list(args)
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError("%s: exit %d: %s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
        try:
            return json.loads(r.stdout) if r.stdout.strip() else None
        except ValueError:
            return r.stdout

    def set_policy(self, name, policy):
        self.ctl("policy", "set", "--yes", name, "-f", "-", stdin=json.dumps(policy))

    def fleet_view(self, dependency):
        """The coordinator's view of dependency (fuseboxctl deps), or None."""
        out = self.ctl("deps")
        for d in (out or {}).get("dependencies", []):
            if d.get("dependency") == dependency:
                return d
        return None

    def gocaller(self, agent, dependency, want="", calls=0, timeout=20):
        """Run the Go clientlib caller against agent; its report."""
        cmd = [os.path.join(self.bins, "gocaller"), "-agent", agent.address, "-dependency", dependency,
               "-want", want, "-calls", str(calls), "-timeout", "%gs" % timeout]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
        try:
            return json.loads(r.stdout)
        except ValueError:
            raise RuntimeError("gocaller: exit %d: %s%s" % (r.returncode, r.stdout, r.stderr)) from None

    def close(self):
        for a in self.agents:
            with contextlib.suppress(Exception):
                a.resume()
            a.stop()
        _terminate(self.coordinator)
        if os.environ.get("FUSEBOX_TEST_KEEP"):
            print("fusebox test fleet kept in", self.dir, file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class DependencyServer:
    """An HTTP dependency on 127.0.0.1 port 0. mode says how it answers:
    "ok" (200), "503", "500", "hang" (answers only after hang seconds, or
    when closed), "retry-after" (503 with Retry-After: 1 once per key or
    path, then 200), or a callable (handler -> (status, headers, body)).
    Every request is recorded (method, path, Idempotency-Key, headers,
    monotonic time)."""

    def __init__(self, mode="ok", hang=30.0):
        self.mode, self.hang = mode, hang
        self.requests = []
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._seen = set()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with outer._mu:
                    outer.requests.append({"method": self.command, "path": self.path,
                                           "key": self.headers.get("Idempotency-Key"),
                                           "headers": dict(self.headers), "at": time.monotonic(), "body": body})
                status, headers, out = outer._answer(self)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)  # a client that gave up is no error

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.host = "127.0.0.1:%d" % self.port
        self.url = "http://" + self.host
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def _answer(self, h):
        m = self.mode
        if callable(m):
            return m(h)
        if m == "503":
            return 503, {}, b"down"
        if m == "500":
            return 500, {}, b"broken"
        if m == "hang":
            self._stop.wait(self.hang)
            return 200, {}, b"late"
        if m == "retry-after":
            k = h.headers.get("Idempotency-Key") or h.path
            with self._mu:
                first = k not in self._seen
                self._seen.add(k)
            if first:
                return 503, {"Retry-After": "1"}, b"later"
        return 200, {}, b"ok"

    def count(self, **match):
        with self._mu:
            return sum(1 for r in self.requests if all(r.get(k) == v for k, v in match.items()))

    def close(self):
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
