"""The Session stream with the agent: Hello, then count deltas out and
snapshots in; the unary questions (AcquireRetry, AcquireProbe, Check)."""

import logging
import threading
import time

import grpc

from . import _policy as P
from .v1 import fusebox_pb2 as pb
from .v1 import fusebox_pb2_grpc as pbg

log = logging.getLogger("fusebox")

#: Bound on the wait for the agent's Welcome.
WELCOME_TIMEOUT = 5.0
#: Probe results queued for the agent at most.
MAX_PENDING_PROBE_RESULTS = 1024
#: Flush intervals a send may take before the session is declared stuck
#: and restarted (the local breakers then decide).
STUCK_SENDS = 20


class _Stream:
    """One Session stream: the request generator gRPC consumes in its own
    thread, fed from the session's pending deltas."""

    def __init__(self, session, hello):
        self.s = session
        self.hello = hello
        self.wake = threading.Event()
        self.ended = False
        self.finishing = False
        self.sending_since = 0.0
        self.call = None

    def requests(self):
        yield pb.SessionRequest(hello=self.hello)
        s = self.s
        while True:
            self.sending_since = 0.0  # gRPC asked for the next one: the last is sent
            self.wake.wait()
            self.wake.clear()
            if self.ended:
                return
            if self.finishing:
                m = s.take()
                while m is not None:
                    yield pb.SessionRequest(deltas=m)
                    m = s.take()
                return  # half-close: the agent ends the stream
            m = s.take()
            if m is not None:
                self.sending_since = time.monotonic()
                yield pb.SessionRequest(deltas=m)


class Session:
    def __init__(self, client, target):
        self.c = client
        self.target = target
        ms = lambda s: max(int(s * 1000), 1)  # noqa: E731
        self.channel = grpc.insecure_channel(target, options=[
            # Reconnect the transport at the session's pace.
            ("grpc.initial_reconnect_backoff_ms", ms(client.reconnect_min)),
            ("grpc.min_reconnect_backoff_ms", ms(client.reconnect_min)),
            ("grpc.max_reconnect_backoff_ms", ms(client.reconnect_max)),
            ("grpc.enable_http_proxy", 0),
        ])
        self.stub = pbg.AgentStub(self.channel)
        self.connected = False
        self.epoch = 0  # sessions welcomed so far: an answer applies to its own
        self.node = ""
        self.fallbacks = {"acquire_retry": 0, "acquire_probe": 0, "check": 0}
        self.sessions = 0
        self.session_failures = 0
        self._mu = threading.Lock()
        self._pending = {}
        self._in_flight = {}
        self._probes = []
        self._subs = []
        self._stream = None
        self._closing = threading.Event()
        self._reported = 0  # 0 nothing yet, 1 connected, -1 away
        self._thread = threading.Thread(target=self._loop, name="fusebox-session", daemon=True)

    def start(self):
        self._thread.start()

    # --- what the flusher and the calls queue ---

    def subscribe(self, name):
        with self._mu:
            self._subs.append(name)
        self.kick()

    def add_deltas(self, name, d):
        with self._mu:
            p = self._pending.get(name)
            if p is None:
                self._pending[name] = list(d)
            else:
                for i in range(6):
                    p[i] += d[i]

    def set_in_flight(self, name, n):
        with self._mu:
            self._in_flight[name] = n

    def add_probe_result(self, name, gen, success, slow=False):
        with self._mu:
            if len(self._probes) < MAX_PENDING_PROBE_RESULTS:
                self._probes.append(pb.ProbeResult(dependency=name, generation=gen, success=success, slow=slow))
        self.kick()

    def kick(self):
        """Wake the sender; restart a session whose send is stuck."""
        st = self._stream
        if st is None:
            return
        st.wake.set()
        since = st.sending_since
        if since and time.monotonic() - since > STUCK_SENDS * self.c.flush_interval and st.call is not None:
            st.call.cancel()

    def take(self):
        """The next deltas message, or None when there is nothing to send."""
        with self._mu:
            if not (self._pending or self._probes or self._subs or self._in_flight):
                return None
            m = pb.CountDeltas(probe_results=self._probes, subscribe=self._subs)
            for name, c in self._pending.items():
                dc = m.deltas.add(dependency=name)
                dc.counts.first_attempts, dc.counts.retries, dc.counts.successes = c[0], c[1], c[2]
                dc.counts.failures, dc.counts.slow_calls, dc.counts.rejected = c[3], c[4], c[5]
                n = self._in_flight.pop(name, None)
                if n is not None:
                    dc.in_flight = n
            for name, n in self._in_flight.items():
                dc = m.deltas.add(dependency=name, in_flight=n)
                dc.counts.SetInParent()
            self._pending, self._in_flight, self._probes, self._subs = {}, {}, [], []
            return m

    # --- the stream ---

    def _loop(self):
        c = self.c
        delay = c.reconnect_min
        while not self._closing.is_set():
            welcomed, err = self._run_once()
            if self._closing.is_set():
                return
            if welcomed:
                delay = c.reconnect_min
            self.session_failures += 1
            if self._reported != -1:  # say once that the agent is not there
                self._reported = -1
                log.warning("agent at %s unreachable (%s): deciding locally", c.agent_address, err)
                if c._events is not None:
                    c._emit(_agent_event(False, error=err))
            # Equal jitter: delay/2 + U[0, delay/2).
            if self._closing.wait(delay / 2 + c._random() * delay / 2):
                return
            delay = min(delay * 2, c.reconnect_max)

    def _run_once(self):
        c = self.c
        with self._mu:
            self._subs = []  # Hello carries them all
        hello = pb.Hello(service=c.service, instance=c.instance, client_version=_version(),
                         dependencies=list(c._deps))
        st = _Stream(self, hello)
        welcomed = False
        try:
            call = self.stub.Session(st.requests())
            st.call = call
            timer = threading.Timer(WELCOME_TIMEOUT, call.cancel)
            timer.daemon = True
            timer.start()
            try:
                first = next(call)
            finally:
                timer.cancel()
            if first.WhichOneof("msg") != "welcome":
                return False, "the agent sent no welcome"
            self._apply_welcome(first.welcome)
            with self._mu:
                self.epoch += 1
                self.node = first.welcome.node
                self._pending, self._probes = {}, []
                self._stream = st
            self.connected = True
            welcomed = True
            self.sessions += 1
            self._reported = 1
            log.info("connected to agent %s at %s", first.welcome.node, c.agent_address)
            if c._events is not None:
                c._emit(_agent_event(True, node=first.welcome.node))
            for resp in call:
                kind = resp.WhichOneof("msg")
                if kind == "update":
                    for m in resp.update.snapshots:
                        d = c._deps.get(m.dependency)
                        if d is not None:
                            d._apply_agent_snapshot(m, True)
                elif kind == "error":
                    d = c._deps.get(resp.error.dependency)
                    if d is not None:
                        d._agent_refused(resp.error.message)
            return welcomed, "the agent ended the session"
        except grpc.RpcError as e:
            return welcomed, _rpc_error(e)
        except StopIteration:
            return welcomed, "the agent ended the session"
        finally:
            st.ended = True
            st.wake.set()
            if welcomed:
                self._disconnect()

    def _disconnect(self):
        with self._mu:
            self._stream = None
            self.node = ""
        self.connected = False
        for d in self.c._deps.values():
            d._disconnected()

    def _apply_welcome(self, w):
        """The fleet default policy's settings become the local default."""
        c = self.c
        if not w.HasField("default_snapshot"):
            return
        try:
            pol = P.policy_from_json(w.default_snapshot.policy_json)
        except ValueError:
            return  # an invalid default is ignored: the previous one stays
        c._default_policy = pol
        for d in c._deps.values():
            if not d._policy_seen:
                d._local.set_policy(pol)

    # --- unary questions ---

    def ask(self, dep, call):
        """AcquireRetry, AcquireProbe or Check about dep, bounded by
        agent_wait; the answer's snapshot is installed when newer. None
        when the agent did not answer."""
        c = self.c
        epoch = self.epoch
        try:
            if call == "check":
                d = self.stub.Check(pb.CheckRequest(dependency=dep.name, kind=pb.ATTEMPT_KIND_FIRST,
                                                    service=c.service, instance=c.instance), timeout=c.agent_wait)
            else:
                req = pb.AcquireRequest(dependency=dep.name, service=c.service, instance=c.instance)
                f = self.stub.AcquireRetry if call == "acquire_retry" else self.stub.AcquireProbe
                d = f(req, timeout=c.agent_wait)
        except (grpc.RpcError, ValueError):  # ValueError: the channel is closed
            self.fallbacks[call] += 1
            return None
        if d.HasField("snapshot"):
            s = d.snapshot
            if s.dependency == dep.name and s.version != 0 and self.connected and self.epoch == epoch:
                dep._apply_agent_snapshot(s, False)
        return d

    def close(self, wait):
        """Send what is queued, half-close and wait at most wait for the
        agent to end the stream; then close the connection."""
        self._closing.set()
        st = self._stream
        if st is not None and self.connected:
            st.finishing = True
            st.wake.set()
            self._thread.join(wait)
        st = self._stream
        if st is not None and st.call is not None:
            st.call.cancel()
        self.channel.close()
        self._thread.join(1.0)


def _rpc_error(e):
    try:
        return "%s: %s" % (e.code().name, e.details())
    except Exception:  # not a call error
        return str(e)


def _agent_event(connected, node="", error=""):
    from ._client import AgentEvent
    return AgentEvent(connected=connected, node=node, error=error)


def _version():
    from ._client import VERSION
    return VERSION
