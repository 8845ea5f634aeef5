"""The call loop without an agent process: idempotency classes,
classification, deadlines, headers, and decisions from snapshots given to
the client directly (a pushed snapshot kept for the local mode, or a fake
agent session)."""

import json
import threading
import unittest

import requests

import fusebox
from fusebox import _client as C
from fusebox import _policy as P
from fusebox import requests_adapter as RA
from fusebox.v1 import fusebox_pb2 as pb


class FakeTime:
    """A monotonic clock, a wall clock and a sleep that moves both."""

    def __init__(self):
        self.t, self.w = 1000.0, 1.7e9
        self.sleeps = []

    def clock(self):
        return self.t

    def wall(self):
        return self.w

    def sleep(self, d):
        self.sleeps.append(d)
        self.advance(d)

    def advance(self, d):
        self.t += d
        self.w += d


def new_client(ft, **kw):
    kw.setdefault("random", lambda: 0.5)
    return fusebox.Client(no_agent=True, service="svc", clock=ft.clock, wall=ft.wall, sleep=ft.sleep, **kw)


class Flaky:
    """An attempt function failing with errs[i] on attempt i (then
    succeeding), recording every Attempt."""

    def __init__(self, *errs, takes=0.0, ft=None):
        self.errs, self.takes, self.ft = list(errs), takes, ft
        self.attempts = []

    def __call__(self, a):
        self.attempts.append((a.number, a.idempotency_key, a.headers(), a.timeout))
        if self.ft is not None and self.takes:
            self.ft.advance(self.takes)
        if len(self.attempts) <= len(self.errs):
            raise self.errs[len(self.attempts) - 1]
        return "ok"


class ClassesTest(unittest.TestCase):
    def setUp(self):
        self.ft = FakeTime()
        self.c = new_client(self.ft)
        self.addCleanup(self.c.close)

    def test_non_retryable_makes_one_attempt(self):
        f = Flaky(ConnectionRefusedError("down"))
        with self.assertRaises(ConnectionRefusedError):
            self.c.call("dep", f)
        self.assertEqual(len(f.attempts), 1)
        self.assertEqual(self.c.dependency("dep").stats()["failures"], 1)

    def test_idempotent_is_retried_with_backoff(self):
        f = Flaky(ConnectionRefusedError("down"), TimeoutError("slow"))
        self.assertEqual(self.c.call("dep", f, fusebox.IDEMPOTENT), "ok")
        self.assertEqual([a[0] for a in f.attempts], [1, 2, 3])
        # Full jitter with a draw of 0.5: half of 100 ms, then of 200 ms.
        self.assertEqual([round(s, 6) for s in self.ft.sleeps], [0.05, 0.1])
        st = self.c.dependency("dep").stats()
        self.assertEqual((st["first_attempts"], st["retries"], st["failures"], st["successes"]), (1, 2, 2, 1))

    def test_attempts_stop_at_max_attempts(self):
        f = Flaky(*[ConnectionResetError("reset")] * 5)
        with self.assertRaises(ConnectionResetError):
            self.c.call("dep", f, fusebox.IDEMPOTENT, max_attempts=2)
        self.assertEqual(len(f.attempts), 2)

    def test_keyed_calls_carry_one_key(self):
        f = Flaky(ConnectionResetError("reset"), ConnectionResetError("reset"))
        self.c.call("dep", f, fusebox.IDEMPOTENT_WITH_KEY)
        keys = {a[1] for a in f.attempts}
        self.assertEqual(len(keys), 1)
        self.assertEqual(len(keys.pop()), 32)
        self.assertTrue(all(a[2]["Idempotency-Key"] == f.attempts[0][1] for a in f.attempts))
        g = Flaky(ConnectionResetError("reset"))
        self.c.call("dep", g, fusebox.IDEMPOTENT_WITH_KEY, idempotency_key="order-42")
        self.assertEqual([a[1] for a in g.attempts], ["order-42", "order-42"])
        for bad in ("", "x" * 1025, "caf\u00e9", "a\nb"):
            with self.assertRaises(fusebox.InvalidOptionError):
                self.c.call("dep", g, fusebox.IDEMPOTENT_WITH_KEY, idempotency_key=bad)

    def test_errors_not_retried(self):
        for err, failure in [(fusebox.HTTPStatusError(500), True), (fusebox.HTTPStatusError(404), False),
                             (ValueError("bug"), True), (fusebox.NotRetryable(ConnectionResetError()), True),
                             (fusebox.RetryAfter(TimeoutError(), -1), True),
                             (fusebox.OpenError("nested", "open"), True)]:
            with self.subTest(err=err):
                f = Flaky(err)
                before = self.c.dependency("dep").stats()["failures"]
                with self.assertRaises(type(err)):
                    self.c.call("dep", f, fusebox.IDEMPOTENT)
                self.assertEqual(len(f.attempts), 1)
                self.assertEqual(self.c.dependency("dep").stats()["failures"] - before, int(failure))

    def test_retry_after_is_honoured(self):
        f = Flaky(fusebox.HTTPStatusError(503, retry_after=1.5))
        self.c.call("dep", f, fusebox.IDEMPOTENT, timeout=10)
        self.assertEqual(self.ft.sleeps, [1.5])
        f = Flaky(fusebox.RetryAfter(ConnectionResetError(), 2.0))
        self.ft.sleeps.clear()
        self.c.call("dep", f, fusebox.IDEMPOTENT)
        self.assertEqual(self.ft.sleeps, [2.0])

    def test_a_retry_after_past_the_deadline_ends_the_call(self):
        f = Flaky(fusebox.HTTPStatusError(503, retry_after=5))
        with self.assertRaises(fusebox.DeadlineExceeded) as cm:
            self.c.call("dep", f, fusebox.IDEMPOTENT, timeout=2)
        self.assertIsInstance(cm.exception.last_error, fusebox.HTTPStatusError)
        self.assertEqual(len(f.attempts), 1)
        self.assertEqual(self.ft.sleeps, [], "no sleep that cannot end in time")

    def test_per_attempt_timeouts_under_one_deadline(self):
        # Each attempt takes its whole 0.5 s timeout: an own timeout (a
        # slow failure, retried whatever the error says) until the next one
        # no longer fits in 1.2 s.
        f = Flaky(*[ValueError("gave up")] * 5, takes=0.5, ft=self.ft)
        with self.assertRaises(fusebox.DeadlineExceeded):
            self.c.call("dep", f, fusebox.IDEMPOTENT, timeout=1.2)
        self.assertEqual(len(f.attempts), 2, "0.5 s + 0.05 s backoff + 0.5 s fits in 1.2 s; a third would not")
        self.assertEqual([a[3] for a in f.attempts], [0.5, 0.5])
        st = self.c.dependency("dep").stats()
        self.assertEqual((st["failures"], st["slow_calls"]), (2, 2))

    def test_attempt_timeout_is_capped_by_the_deadline(self):
        f = Flaky()
        self.c.call("dep", f, timeout=0.2)
        self.assertAlmostEqual(f.attempts[0][3], 0.2)
        self.assertEqual(f.attempts[0][2]["Fusebox-Timeout-Ms"], "200")
        f = Flaky()
        self.c.call("dep", f, attempt_timeout=0)
        self.assertIsNone(f.attempts[0][3])
        self.assertNotIn("Fusebox-Timeout-Ms", f.attempts[0][2])

    def test_the_deadline_passing_during_an_attempt_ends_the_call(self):
        f = Flaky(ConnectionResetError("reset"), takes=2, ft=self.ft)
        with self.assertRaises(fusebox.DeadlineExceeded) as cm:
            self.c.call("dep", f, fusebox.IDEMPOTENT, timeout=1, attempt_timeout=0)
        self.assertIsInstance(cm.exception.__cause__, ConnectionResetError)

    def test_one_retrying_layer(self):
        f = Flaky(ConnectionResetError("reset"))
        self.c.call("dep", Flaky(), fusebox.IDEMPOTENT)
        with fusebox.retry_owner("edge"):
            with self.assertRaises(ConnectionResetError):
                self.c.call("dep", f, fusebox.IDEMPOTENT)
            self.assertEqual(len(f.attempts), 1, "the caller's caller retries")
            self.assertEqual(f.attempts[0][2]["Fusebox-Retry-Owner"], "edge")
            g = Flaky(ConnectionResetError("reset"))
            self.c.call("dep", g, fusebox.IDEMPOTENT, nested_retries=True)
            self.assertEqual(len(g.attempts), 2)
        h = Flaky()
        self.c.call("dep", h)
        self.assertEqual(h.attempts[0][2]["Fusebox-Retry-Owner"], "svc")

    def test_wsgi_middleware(self):
        seen = {}

        def app(environ, start_response):
            f = Flaky(ConnectionResetError("reset"))
            try:
                self.c.call("dep", f, fusebox.IDEMPOTENT)
            except ConnectionResetError:
                pass
            seen["attempts"], seen["headers"] = len(f.attempts), f.attempts[0][2]
            return [b""]

        fusebox.wsgi_middleware(app, clock=self.ft.clock)(
            {"HTTP_FUSEBOX_RETRY_OWNER": "edge", "HTTP_FUSEBOX_TIMEOUT_MS": "300"}, None)
        self.assertEqual(seen["attempts"], 1)
        self.assertEqual(seen["headers"]["Fusebox-Retry-Owner"], "edge")
        self.assertEqual(seen["headers"]["Fusebox-Timeout-Ms"], "300")

    def test_fallback(self):
        self.assertEqual(self.c.call("dep", Flaky(ValueError("x")), fallback=lambda e: "fb:%s" % e), "fb:x")

    def test_invalid_names_and_options(self):
        with self.assertRaises(fusebox.InvalidDependencyError):
            self.c.dependency("no spaces")
        with self.assertRaises(fusebox.InvalidOptionError):
            self.c.call("dep", Flaky(), max_attempts=0)
        with self.assertRaises(fusebox.InvalidOptionError):
            self.c.call("dep", Flaky(), attempt_timeout=-1)
        c = new_client(self.ft, max_dependencies=1)
        self.addCleanup(c.close)
        c.dependency("a")
        with self.assertRaises(fusebox.TooManyDependenciesError):
            c.dependency("b")

    def test_config_errors_name_every_field(self):
        with self.assertRaises(ValueError) as cm:
            fusebox.Client("tcp://10.0.0.1:7950", service="has space", flush_interval=1, agent_wait=0)
        msg = str(cm.exception)
        for field in ("agent_address", "service", "flush_interval", "agent_wait"):
            self.assertIn(field, msg)
        for bad in ("10.0.0.1:7950", "unix://relative", "localhost:0"):
            with self.assertRaises(ValueError):
                C.agent_target(bad)
        self.assertEqual(C.agent_target("/run/x.sock"), "unix:///run/x.sock")
        self.assertEqual(C.agent_target("127.0.0.1:7950"), "127.0.0.1:7950")


# The built-in default policy as an agent pushes it: sharedstate.DefaultPolicy
# as its JSON document.
DEFAULT_POLICY_DOC = {
    "schema": 1, "dependency": "_default",
    "breaker": {"failureRateThreshold": 0.5, "slowCallRateThreshold": 1, "slowCallDuration": "2s",
                "minimumRequests": 20, "minFailingNodes": 2, "window": "10s", "openDuration": "2s",
                "maxOpenDuration": "2m0s", "halfOpenProbes": 3, "probeSuccessThreshold": 3, "probeTimeout": "5s",
                "scope": "fleet", "mode": "enforce", "confidence": 0.95, "fastPath": True,
                "fleetMaxOpenDuration": "2s", "rampDuration": "500ms", "rampStart": 0.1},
    "retry": {"maxAttempts": 3, "perAttemptTimeout": "500ms",
              "backoff": {"base": "100ms", "max": "5s", "jitter": "full"},
              "budget": {"ratio": 0.1, "minRetriesPerSecond": 10}, "hedge": {"delay": "0s", "maxHedges": 0}},
    "throttle": {"enabled": False, "k": 2, "minRequests": 20},
    "concurrency": {"maxInFlight": 0},
}


def policy_json(dep="dep", **sections):
    """The default policy's JSON document for dep, with the fields each
    section names (breaker={"mode": "shadow"}) replaced."""
    doc = json.loads(json.dumps(DEFAULT_POLICY_DOC))
    doc["dependency"] = dep
    for name, fields in sections.items():
        doc[name].update(fields)
    return json.dumps(doc).encode()


def pushed(dep="dep", policy=None, **kw):
    """A snapshot of dep as the agent pushes it, under the default policy
    changed by policy ({"breaker": {"mode": "shadow"}})."""
    m = pb.DecisionSnapshot(dependency=dep, state=pb.BREAKER_STATE_CLOSED, local_state=pb.BREAKER_STATE_CLOSED,
                            version=kw.pop("version", 1), policy_json=policy_json(dep, **(policy or {})))
    for k, v in kw.items():
        if hasattr(v, "CopyFrom"):
            getattr(m, k).CopyFrom(v)
        else:
            setattr(m, k, v)
    return m


class LocalModeTest(unittest.TestCase):
    """What the client keeps of the agent's last snapshot while the agent
    is away (here: never there)."""

    def setUp(self):
        self.ft = FakeTime()
        self.c = new_client(self.ft)
        self.addCleanup(self.c.close)
        self.d = self.c.dependency("dep")

    def test_a_force_open_holds_until_it_expires(self):
        m = pushed(override=pb.OVERRIDE_STATE_FORCED_OPEN, override_reason="maintenance")
        m.override_expires.FromNanoseconds(int((self.ft.w + 5) * 1e9))
        self.d._apply_agent_snapshot(m, True)
        f = Flaky()
        with self.assertRaises(fusebox.ForcedOpenError) as cm:
            self.d.call(f)
        self.assertIsInstance(cm.exception, fusebox.OpenError)
        self.assertEqual(f.attempts, [])
        st = self.d.status()
        self.assertEqual((st.override, st.from_agent, st.rejecting), (P.FORCED_OPEN, False, True))
        self.ft.advance(5.1)
        self.d._publish()  # what the flusher does every flush
        self.assertEqual(self.d.call(f), "ok")
        self.assertEqual(self.d.status().override, P.OVERRIDE_NONE)

    def test_a_force_open_without_expiry_holds(self):
        self.d._apply_agent_snapshot(pushed(override=pb.OVERRIDE_STATE_FORCED_OPEN), True)
        self.ft.advance(3600)
        self.d._publish()
        with self.assertRaises(fusebox.ForcedOpenError):
            self.d.call(Flaky())

    def test_forced_closed_beats_the_local_breaker(self):
        self.d._apply_agent_snapshot(pushed(override=pb.OVERRIDE_STATE_FORCED_CLOSED, policy={"breaker": {"minimumRequests": 5}}), True)
        for _ in range(10):
            with self.assertRaises(ConnectionRefusedError):
                self.d.call(Flaky(ConnectionRefusedError()))
        self.c._flush()
        self.assertEqual(self.d._local.snapshot().state, P.OPEN, "the local breaker tripped")
        self.assertEqual(self.d.call(Flaky()), "ok", "and the override still decides")

    def test_throttle_probability_is_applied(self):
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.6), True)
        with self.assertRaises(fusebox.ThrottledError) as cm:  # draw 0.5 < 0.6
            self.d.call(Flaky())
        self.assertIsInstance(cm.exception, fusebox.OpenError)
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.4, version=2), True)
        self.assertEqual(self.d.call(Flaky()), "ok")
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.9, policy={"breaker": {"mode": "shadow"}}, version=3), True)
        self.assertEqual(self.d.call(Flaky()), "ok")
        self.assertEqual(self.d.stats()["shadow_throttled"], 1)

    def test_the_ramps_probability_is_not_kept(self):
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.6, ramp_probability=0.6), True)
        self.d._disconnected()
        self.d._publish()
        self.assertEqual(self.d.call(Flaky()), "ok", "a ramp lasts rampDuration, not a window")

    def test_a_throttle_probability_holds_one_window_after_the_agent_went_away(self):
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.6), True)
        self.d._disconnected()
        self.ft.advance(9.9)  # the default window is 10 s
        self.d._publish()
        with self.assertRaises(fusebox.ThrottledError):  # draw 0.5 < 0.6
            self.d.call(Flaky())
        self.ft.advance(0.2)
        self.d._publish()  # what the flusher does every flush
        self.assertEqual(self.d.call(Flaky()), "ok")
        self.assertEqual(self.d.status().throttle_probability, 0.0)

    def test_concurrency_share(self):
        self.d._apply_agent_snapshot(pushed(concurrency_limit=1), True)
        inside, release = threading.Event(), threading.Event()

        def hold(a):
            inside.set()
            release.wait(10)
            return "held"

        t = threading.Thread(target=lambda: self.d.call(hold))
        t.start()
        self.assertTrue(inside.wait(10))
        self.assertEqual(self.d.in_flight, 1)
        with self.assertRaises(fusebox.ConcurrencyLimitError) as cm:
            self.d.call(Flaky())
        self.assertNotIsInstance(cm.exception, fusebox.OpenError)
        release.set()
        t.join(10)
        self.assertEqual(self.d.in_flight, 0)
        self.assertEqual(self.d.call(Flaky()), "ok")


class FakeSession:
    """Stands for the agent's Session: connected, answering questions with
    canned Decisions."""

    def __init__(self, answers):
        self.connected, self.epoch, self.answers, self.asked = True, 1, answers, []
        self.probes, self.deltas = [], []

    def ask(self, dep, call):
        self.asked.append(call)
        a = self.answers.get(call)
        return a() if callable(a) else a

    def add_probe_result(self, name, gen, success, slow=False):
        self.probes.append((name, gen, success, slow))

    def add_deltas(self, name, d):
        self.deltas.append((name, d))

    def set_in_flight(self, name, n):
        pass

    def kick(self):
        pass

    def subscribe(self, name):
        pass

    def close(self, wait):
        pass


class AgentPathTest(unittest.TestCase):
    def setUp(self):
        self.ft = FakeTime()
        self.c = new_client(self.ft)
        self.c._pb = pb
        self.s = FakeSession({})
        self.c._session = self.s
        self.addCleanup(self.c.close)
        self.d = self.c.dependency("dep")
        self.d._apply_agent_snapshot(pushed(), True)

    def test_first_attempts_ask_nothing_retries_ask_the_budget(self):
        self.s.answers["acquire_retry"] = pb.Decision(verdict=pb.VERDICT_ALLOW)
        self.assertTrue(self.d.status().from_agent)
        self.d.call(Flaky(ConnectionResetError()), fusebox.IDEMPOTENT)
        self.assertEqual(self.s.asked, ["acquire_retry"])
        self.c._flush()
        self.assertEqual(self.s.deltas, [("dep", (1, 0, 1, 1, 0, 0))],
                         "first attempts and outcomes go to the agent; AcquireRetry counted the retry")

    def test_a_refused_retry_says_why_and_what_failed(self):
        self.s.answers["acquire_retry"] = pb.Decision(verdict=pb.VERDICT_REJECT, reason=pb.REJECT_REASON_BUDGET_EXHAUSTED)
        f = Flaky(ConnectionResetError("reset"), ConnectionResetError("reset"))
        with self.assertRaises(fusebox.BudgetExhaustedError) as cm:
            self.d.call(f, fusebox.IDEMPOTENT)
        self.assertIsInstance(cm.exception.last_error, ConnectionResetError)
        self.assertIs(cm.exception.__cause__, cm.exception.last_error)
        self.assertEqual(len(f.attempts), 1)

    def test_an_agent_that_does_not_answer_leaves_it_to_the_local_budget(self):
        self.s.answers["acquire_retry"] = None
        self.assertEqual(self.d.call(Flaky(ConnectionResetError()), fusebox.IDEMPOTENT), "ok")
        self.assertEqual(self.d.stats()["retries"], 1)
        self.assertEqual(self.d._local.totals()[1], 1, "the local breaker counted the retry it admitted")

    def test_half_open_probe_permit_from_the_agent(self):
        self.d._apply_agent_snapshot(pushed(state=pb.BREAKER_STATE_HALF_OPEN, probe_permit=True, generation=4, version=2), True)
        self.s.answers["acquire_probe"] = pb.Decision(verdict=pb.VERDICT_ALLOW_PROBE, snapshot=pushed(generation=4))
        f = Flaky()
        self.d.call(f)
        self.assertEqual(self.s.probes, [("dep", 4, True, False)])
        self.s.answers["acquire_probe"] = pb.Decision(verdict=pb.VERDICT_REJECT, reason=pb.REJECT_REASON_HALF_OPEN_NO_PERMIT)
        with self.assertRaises(fusebox.OpenError) as cm:
            self.d.call(f)
        self.assertEqual(cm.exception.reason, "half-open-no-permit")

    def test_the_ramps_refusals_are_named_as_the_ramps(self):
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.6, ramp_probability=0.55, version=2), True)
        with self.assertRaises(fusebox.ThrottledError) as cm:  # draw 0.5 < 0.55: the ramp alone refuses it
            self.d.call(Flaky())
        self.assertEqual(cm.exception.reason, "ramp")
        self.assertIsInstance(cm.exception, fusebox.OpenError)
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.6, ramp_probability=0.3, version=3), True)
        with self.assertRaises(fusebox.ThrottledError) as cm:  # 0.3 <= 0.5 < 0.6: the throttle's
            self.d.call(Flaky())
        self.assertEqual(cm.exception.reason, "throttled")
        self.d._apply_agent_snapshot(pushed(throttle_probability=0.4, ramp_probability=0.9, version=4), True)
        self.assertEqual(self.d.call(Flaky()), "ok", "a ramp above the throttle probability is dropped")
        self.s.answers["check"] = pb.Decision(verdict=pb.VERDICT_REJECT, reason=pb.REJECT_REASON_RAMP)
        with self.assertRaises(fusebox.ThrottledError) as cm:
            self.d.call(Flaky(), strict=True)
        self.assertEqual(cm.exception.reason, "ramp")

    def test_strict_asks_check(self):
        self.s.answers["check"] = pb.Decision(verdict=pb.VERDICT_REJECT, reason=pb.REJECT_REASON_FORCED_OPEN)
        self.assertEqual(self.d.call(Flaky()), "ok")
        with self.assertRaises(fusebox.ForcedOpenError):
            self.d.call(Flaky(), strict=True)
        self.assertEqual(self.s.asked, ["check"])

    def test_an_open_breaker_refuses_in_process(self):
        self.d._apply_agent_snapshot(pushed(state=pb.BREAKER_STATE_OPEN, version=2), True)
        f = Flaky()
        with self.assertRaises(fusebox.OpenError) as cm:
            self.d.call(f)
        self.assertEqual((cm.exception.dependency, cm.exception.reason), ("dep", "open"))
        self.assertEqual((f.attempts, self.s.asked), ([], []))
        self.assertIn("dependency dep, open", str(cm.exception))

    def test_a_late_answer_does_not_replace_a_newer_push(self):
        self.d._apply_agent_snapshot(pushed(state=pb.BREAKER_STATE_OPEN, version=5), True)
        self.d._apply_agent_snapshot(pushed(version=4), False)
        self.assertEqual(self.d.status().state, P.OPEN)


class AdapterClassTest(unittest.TestCase):
    def prep(self, method, headers=None, data=None):
        return requests.Request(method, "http://user:pw@shipping.internal:8080/x", headers=headers or {}, data=data).prepare()

    def test_classes(self):
        for method, headers, data, want in [
            ("GET", None, None, (fusebox.IDEMPOTENT, "")),
            ("DELETE", None, None, (fusebox.IDEMPOTENT, "")),
            ("PUT", None, b"x", (fusebox.IDEMPOTENT, "")),
            ("POST", None, b"x", (fusebox.NON_RETRYABLE, "")),
            ("POST", {"Idempotency-Key": "k1"}, b"x", (fusebox.IDEMPOTENT_WITH_KEY, "k1")),
            ("PATCH", {"Idempotency-Key": "k1"}, None, (fusebox.IDEMPOTENT_WITH_KEY, "k1")),
            ("CONNECT", None, None, (fusebox.NON_RETRYABLE, "")),
            ("PUT", None, iter([b"a", b"b"]), (fusebox.NON_RETRYABLE, "")),
        ]:
            with self.subTest(method=method, headers=headers):
                self.assertEqual(RA.request_class(self.prep(method, headers, data)), want)
        self.assertEqual(RA.request_class(self.prep("POST", None, b"x"), fusebox.IDEMPOTENT_WITH_KEY),
                         (fusebox.IDEMPOTENT_WITH_KEY, ""))

    def test_names(self):
        ft = FakeTime()
        c = new_client(ft)
        self.addCleanup(c.close)
        self.assertEqual(RA.FuseboxAdapter(c).dependency_name(self.prep("GET")), "shipping.internal:8080")
        self.assertEqual(RA.sanitize_name("[::1]:80"), "_::1_:80")
        # As sharedstate.HostDependencyName: bytes, cut at 128.
        self.assertEqual(RA.sanitize_name("b\u00fccher:80"), "b__cher:80")
        self.assertEqual(RA.sanitize_name("a" * 127 + "\u00fc"), "a" * 127 + "_")
        self.assertEqual(RA.FuseboxAdapter(c, dependency="ship").dependency_name(self.prep("GET")), "ship")
        with self.assertRaises(ValueError):
            RA.FuseboxAdapter(c, max_retries=3)

    def test_adapted_errors_are_both(self):
        e = RA._adapt(fusebox.ForcedOpenError("dep", "forced-open"))
        self.assertIsInstance(e, fusebox.ForcedOpenError)
        self.assertIsInstance(e, requests.exceptions.ConnectionError)
        self.assertEqual((e.dependency, e.reason), ("dep", "forced-open"))
        t = RA._adapt(fusebox.DeadlineExceeded(last_error=TimeoutError("x")))
        self.assertIsInstance(t, requests.exceptions.Timeout)
        self.assertIsInstance(t, fusebox.DeadlineExceeded)
        self.assertIn("last attempt", str(t))
