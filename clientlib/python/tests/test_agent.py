"""Scenarios against real agents: a coordinator with its embedded etcd and
two agents built from this tree (harness.Fleet), the Python client on
agent a1, and the Go clientlib (testdata/gocaller) on agent a2."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import requests

import fusebox
from fusebox.requests_adapter import FuseboxAdapter

from . import harness
from .harness import eventually

FAST_BACKOFF = {"backoff": {"base": "1ms", "max": "2ms"}}
POLICIES = {
    # Trips on 10 requests and stays open for the checks that follow.
    "py-dies": {"breaker": {"minimumRequests": 10, "openDuration": "60s", "maxOpenDuration": "2m"}},
    # Trips on 10 requests, half-open after 1 s, closed after 2 probes, and
    # then admits every call at once (no ramp).
    "py-probe": {"breaker": {"minimumRequests": 10, "openDuration": "1s", "probeSuccessThreshold": 2,
                             "probeTimeout": "2s", "rampDuration": "0s"}},
    # Never trips; a budget of 10% of first attempts plus 2 retries per window.
    "py-budget": {"breaker": {"minimumRequests": 1000000},
                  "retry": dict(FAST_BACKOFF, budget={"ratio": 0.1, "minRetriesPerSecond": 0.2})},
    "py-post": {"retry": FAST_BACKOFF},
    "py-kinds": {"breaker": {"slowCallDuration": "30ms"}},
    # Never trips: adaptive throttling alone answers the failures.
    "py-throttle": {"breaker": {"minimumRequests": 1000000},
                    "throttle": {"enabled": True, "k": 2.0, "minRequests": 20}},
    "py-limit": {"concurrency": {"maxInFlight": 2}},
    "py-adapter-503": {"retry": FAST_BACKOFF},
}


def closed_port():
    """A loopback port nothing listens on: connecting is refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def connect(port, timeout):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout):
        return "connected"


class FleetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fleet = harness.Fleet(POLICIES)
        try:
            cls.a1 = cls.fleet.agent("a1")
            cls.a2 = cls.fleet.agent("a2")
            cls.client = fusebox.Client(cls.a1.address, service="pytest")
        except BaseException:
            cls.fleet.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.fleet.close()

    def dep(self, name):
        d = self.client.dependency(name)
        eventually(lambda: d.status().from_agent, 10, "the agent's snapshot of " + name)
        return d

    def session(self, **kw):
        s = requests.Session()
        a = FuseboxAdapter(self.client, **kw)
        s.mount("http://", a)
        self.addCleanup(s.close)
        return s

    def server(self, mode="ok", **kw):
        srv = harness.DependencyServer(mode, **kw)
        self.addCleanup(srv.close)
        return srv

    # --- scenarios ---

    def test_calls_succeed_and_are_reported(self):
        d = self.dep("py-ok")
        for i in range(25):
            self.assertEqual(d.call(lambda a, i=i: i * 2, fusebox.IDEMPOTENT), i * 2)
        eventually(lambda: self.a1.window("py-ok", "successes") >= 25 and self.a1.window("py-ok", "first_attempts") >= 25,
                   10, "a1 to count 25 first attempts and successes")
        view = eventually(lambda: (v := self.fleet.fleet_view("py-ok")) and v["fleet"]["successes"] >= 25 and v,
                          15, "the coordinator to show the 25 successes")
        self.assertEqual(view["state"], "closed")
        self.assertEqual(view["fleet"]["failures"], 0)

    def test_outcomes_of_every_kind_are_reported(self):
        d = self.dep("py-kinds")
        d.call(lambda a: None)
        with self.assertRaises(ConnectionRefusedError):
            d.call(lambda a: connect(closed_port(), a.timeout))
        d.call(lambda a: time.sleep(0.04), attempt_timeout=0)  # a slow success (slowCallDuration 30ms)
        def no_answer(a):
            time.sleep(a.timeout)
            raise TimeoutError("no answer")
        with self.assertRaises(fusebox.DeadlineExceeded):
            d.call(no_answer, timeout=0.05)  # the deadline passed: a slow failure
        with self.assertRaises(fusebox.HTTPStatusError):
            d.call(lambda a: (_ for _ in ()).throw(fusebox.HTTPStatusError(404)))  # an answer: not a failure
        eventually(lambda: self.a1.window("py-kinds", "successes") == 3 and self.a1.window("py-kinds", "failures") == 2,
                   10, "a1 to count 3 successes and 2 failures")
        self.assertEqual(self.a1.window("py-kinds", "first_attempts"), 5)
        self.assertEqual(self.a1.window("py-kinds", "slow_calls"), 2)

    def test_the_driver_reports_counts_as_json(self):
        # What a scenario runner does: the driver as a subprocess.
        srv = self.server("ok")
        r = subprocess.run([sys.executable, os.path.join(harness.HERE, "driver.py"), "--agent", self.a1.address,
                            "--url", srv.url + "/x", "--dependency", "py-driver", "--calls", "12", "--concurrency", "3",
                            "--timeout", "5"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual((out["calls"], out["ok"], out["attempts"], out["rejected"]), (12, 12, 12, {}))
        self.assertTrue(out["status"]["from_agent"])
        self.assertEqual(srv.count(), 12)
        eventually(lambda: self.a1.window("py-driver", "successes") >= 12, 10, "a1 to count the driver's calls")

    def test_a_dead_dependency_opens_the_fleet_breaker(self):
        d = self.dep("py-dies")
        port = closed_port()
        attempts = [0]

        def dead(a):
            attempts[0] += 1
            return connect(port, a.timeout)

        def call_until_open():
            try:
                d.call(dead, fusebox.IDEMPOTENT)
            except fusebox.OpenError:
                return True
            except ConnectionRefusedError:
                return False
            return False
        eventually(call_until_open, 20, "the fleet breaker to open")
        made = attempts[0]
        self.assertLess(made, 100, "10 requests trip it; attempts made before the snapshot said open: %d" % made)
        for _ in range(20):
            with self.assertRaises(fusebox.OpenError):
                d.call(dead, fusebox.IDEMPOTENT)
        self.assertEqual(attempts[0], made, "no attempt once the breaker is open")
        st = d.status()
        self.assertEqual((st.state, st.from_agent), ("open", True))
        # The Python client's failures opened the fleet's breaker: the Go
        # clientlib on the other agent is refused too.
        eventually(lambda: self.a2.breaker_open("py-dies"), 10, "a2 to hold the breaker open")
        go = self.fleet.gocaller(self.a2, "py-dies", want="open", calls=5)
        self.assertTrue(go["reached"], go)
        self.assertEqual((go["from_agent"], go["ok"], go["rejected"]), (True, 0, 5))

    def test_half_open_probes_close_the_breaker(self):
        d = self.dep("py-probe")
        port = closed_port()
        healthy = [False]
        probes = []

        def dep(a):
            if a.probe:
                probes.append(a.number)
            if healthy[0]:
                return "ok"
            return connect(port, a.timeout)

        def call(expect):
            try:
                d.call(dep)
            except expect:
                pass
            except (fusebox.OpenError, ConnectionRefusedError):
                pass
            return d.status()
        eventually(lambda: call(ConnectionRefusedError).state == "open", 20, "the breaker to open")
        healthy[0] = True
        eventually(lambda: call(fusebox.OpenError).state == "closed", 30, "probes to close the breaker")
        self.assertGreaterEqual(len(probes), 2, "probeSuccessThreshold is 2")
        self.assertEqual(d.call(dep), "ok")
        self.assertGreaterEqual(d.stats()["probes"], 2)

    def test_a_force_open_is_obeyed(self):
        d = self.dep("py-forced")
        self.fleet.ctl("force-open", "py-forced", "--ttl", "2m", "--reason", "python test")
        eventually(lambda: d.status().override == fusebox.FORCED_OPEN, 10, "the client to see the force-open")
        called = []
        with self.assertRaises(fusebox.ForcedOpenError) as cm:
            d.call(lambda a: called.append(1), fusebox.IDEMPOTENT)
        self.assertEqual(called, [])
        self.assertEqual(cm.exception.reason, "forced-open")
        self.assertGreater(d.status().override_expires, time.time())
        self.fleet.ctl("clear", "py-forced")
        eventually(lambda: d.status().override == fusebox.OVERRIDE_NONE, 10, "the client to see the override cleared")
        d.call(lambda a: called.append(1))
        self.assertEqual(called, [1])

    def test_the_retry_budget_bounds_retries(self):
        srv = self.server("503")
        s = self.session(dependency="py-budget")
        d = self.dep("py-budget")
        calls = 60
        for _ in range(calls):
            r = s.get(srv.url + "/b", timeout=5)
            self.assertEqual(r.status_code, 503, "the last answer is returned when retries end")
        sent, retries = srv.count(), srv.count() - calls
        # budget = max(0.2/s * 10 s, 0.1 * first attempts) = 6 for 60 calls
        self.assertGreater(retries, 0, "some retries were admitted")
        self.assertLessEqual(retries, int(0.1 * calls) + 2 + 1, "requests sent: %d for %d calls" % (sent, calls))
        self.assertEqual(d.stats()["retries"], retries)
        self.assertGreater(d.stats()["rejected"], 0, "retries were refused")
        with self.assertRaises(fusebox.BudgetExhaustedError) as cm:
            d.call(lambda a: connect(closed_port(), a.timeout), fusebox.IDEMPOTENT)
        self.assertIsInstance(cm.exception.last_error, ConnectionRefusedError)

    def test_post_without_a_key_is_never_retried(self):
        srv = self.server("503")
        s = self.session(dependency="py-post")
        self.dep("py-post")
        for _ in range(5):
            self.assertEqual(s.post(srv.url + "/pay", data=b"{}", timeout=5).status_code, 503)
        self.assertEqual(srv.count(method="POST"), 5, "one request per POST without a key")
        for key in ("k-1", "k-2"):
            s.post(srv.url + "/pay", data=b"{}", headers={"Idempotency-Key": key}, timeout=5)
            self.assertEqual(srv.count(key=key), 3, "a keyed POST is retried with its key on every attempt")
        with self.assertRaises(ConnectionRefusedError):
            self.client.call("py-post", lambda a: connect(closed_port(), a.timeout))

    def test_the_requests_adapter(self):
        srv = self.server("ok")
        s = self.session()
        r = s.get(srv.url + "/hello", timeout=3)
        self.assertEqual((r.status_code, r.text), (200, "ok"))
        h = srv.requests[-1]["headers"]
        self.assertEqual(h["Fusebox-Retry-Owner"], "pytest")
        self.assertTrue(0 < int(h["Fusebox-Timeout-Ms"]) <= 500, h)
        self.assertNotIn("Idempotency-Key", h)
        name = "127.0.0.1:%d" % srv.port
        eventually(lambda: self.a1.window(name, "successes") >= 1, 10, "a1 to count the request under " + name)

        # Retry-After is honoured: the retry waits the second it asks for.
        ra = self.server("retry-after")
        r = s.get(ra.url + "/later", timeout=5)
        self.assertEqual(r.status_code, 200)
        self.assertEqual(ra.count(), 2)
        gap = ra.requests[1]["at"] - ra.requests[0]["at"]
        self.assertGreaterEqual(gap, 0.95, "Retry-After: 1")

        # A POST made keyed by the adapter gets one generated key.
        ra2 = self.server("retry-after")
        s2 = self.session(idempotency=fusebox.IDEMPOTENT_WITH_KEY)
        self.assertEqual(s2.post(ra2.url + "/k", data=b"x", timeout=5).status_code, 200)
        keys = [q["key"] for q in ra2.requests]
        self.assertEqual(len(keys), 2)
        self.assertEqual(len(set(keys)), 1)
        self.assertTrue(keys[0])

        # When retries end the last answer is the caller's.
        bad = self.server("503")
        r = self.session(dependency="py-adapter-503").get(bad.url + "/x", timeout=5)
        self.assertEqual((r.status_code, r.text), (503, "down"))
        self.assertEqual(bad.count(), 3)

    def test_no_call_outlives_its_deadline(self):
        srv = self.server("hang")
        s = self.session(dependency="py-hang")
        self.dep("py-hang")
        for timeout in (0.3, 0.8):
            start = time.monotonic()
            with self.assertRaises(requests.exceptions.Timeout):
                s.get(srv.url + "/slow", timeout=timeout)
            took = time.monotonic() - start
            self.assertLess(took, timeout + 1.0, "a %gs call took %.2fs" % (timeout, took))

        def slow(a):
            with urllib.request.urlopen(srv.url + "/slow", timeout=a.timeout) as r:
                return r.read()
        start = time.monotonic()
        with self.assertRaises(fusebox.DeadlineExceeded):
            self.client.call("py-hang", slow, fusebox.IDEMPOTENT, timeout=1.2, attempt_timeout=0.3, max_attempts=10)
        took = time.monotonic() - start
        self.assertLess(took, 1.2 + 1.0)
        self.assertGreaterEqual(srv.count(path="/slow"), 4, "2 adapter calls, then retries within 1.2 s")

    def test_the_agents_throttle_probability_is_applied(self):
        d = self.dep("py-throttle")
        port = closed_port()
        made = [0]

        def dead(a):
            made[0] += 1
            return connect(port, a.timeout)

        def throttled():
            try:
                d.call(dead)
            except fusebox.ThrottledError:
                return True
            except ConnectionRefusedError:
                pass
            return False
        eventually(throttled, 20, "adaptive throttling to refuse a call")
        p = d.status().throttle_probability
        self.assertGreater(p, 0.5, "requests - 2*accepts over requests + 1, with no accepts")
        before = made[0]
        refused = 0
        for _ in range(100):
            try:
                d.call(dead)
            except fusebox.ThrottledError:
                refused += 1
            except ConnectionRefusedError:
                pass
        self.assertEqual(made[0] - before, 100 - refused, "a throttled call makes no attempt")
        self.assertGreater(refused, 30, "p=%.2f refused only %d of 100" % (p, refused))
        self.assertEqual(d.status().state, "closed", "the breaker did not open: throttling refused")

    def test_the_agents_concurrency_share_is_applied(self):
        d = self.dep("py-limit")
        eventually(lambda: d.status().concurrency_limit == 2, 10, "the agent's share of maxInFlight 2")
        inside, release = threading.Semaphore(0), threading.Event()

        def hold(a):
            inside.release()
            release.wait(20)
            return "held"
        threads = [threading.Thread(target=d.call, args=(hold,)) for _ in range(2)]
        for t in threads:
            t.start()
        self.addCleanup(release.set)
        for _ in range(2):
            self.assertTrue(inside.acquire(timeout=10))
        with self.assertRaises(fusebox.ConcurrencyLimitError):
            d.call(lambda a: "third")
        eventually(lambda: self.a1.metric("fusebox_agent_in_flight", dependency="py-limit", scope="node") == 2,
                   10, "a1 to count the 2 calls in flight")
        waiting = []
        t = threading.Thread(target=lambda: waiting.append(d.call(lambda a: "waited", wait_for_slot=20)))
        t.start()
        release.set()
        for th in threads + [t]:
            th.join(20)
        self.assertEqual(waiting, ["waited"])
        self.assertEqual(d.in_flight, 0)

    def test_strict_consult_asks_the_agent(self):
        d = self.dep("py-strict")
        for _ in range(5):
            self.assertEqual(d.call(lambda a: "ok", strict=True), "ok")
        self.assertEqual(self.client._session.fallbacks["check"], 0, "the agent answered every Check")
        eventually(lambda: self.a1.window("py-strict", "successes") >= 5, 10, "a1 to count the strict calls")


class FallbackTest(unittest.TestCase):
    """The agent killed, paused and restarted under a client."""

    def setUp(self):
        self.fleet = harness.Fleet({
            "fb-plain": {"retry": dict(FAST_BACKOFF, budget={"ratio": 0, "minRetriesPerSecond": 0.1})}})
        self.addCleanup(self.fleet.close)
        self.agent = self.fleet.agent("a3")
        self.agent_events, self.state_changes = [], []
        self.client = fusebox.Client(self.agent.address, service="pytest-fallback", reconnect_max=0.5,
                                     on_agent_change=self.agent_events.append,
                                     on_state_change=self.state_changes.append)
        self.addCleanup(self.client.close)

    def dep(self, name):
        d = self.client.dependency(name)
        eventually(lambda: d.status().from_agent, 10, "the agent's snapshot of " + name)
        return d

    def test_agent_killed_then_back(self):
        plain, forced = self.dep("fb-plain"), self.dep("fb-forced")
        self.fleet.ctl("force-open", "fb-forced", "--ttl", "6s", "--reason", "fallback test")
        eventually(lambda: forced.status().override == fusebox.FORCED_OPEN, 10, "the client to see the force-open")
        expires = forced.status().override_expires
        calls = []

        with self.assertLogs("fusebox", "INFO") as logs:
            self.agent.kill()
            eventually(lambda: not self.client.agent_connected, 10, "the client to notice the agent is gone")
            # Calls keep working on the local breaker.
            self.assertEqual(plain.call(lambda a: calls.append(a.number) or "ok", fusebox.IDEMPOTENT), "ok")
            self.assertFalse(plain.status().from_agent)
            # ... with no retries beyond the local budget (1 per window here).
            port = closed_port()
            tries = []

            def refused(a):
                tries.append(a.number)
                return connect(port, a.timeout)
            for want in ([1, 2], [1, 2, 1]):
                with self.assertRaises(fusebox.BudgetExhaustedError) as cm:
                    plain.call(refused, fusebox.IDEMPOTENT)
                self.assertIsInstance(cm.exception.last_error, ConnectionRefusedError)
                self.assertEqual(tries, want)
            self.assertEqual(plain.stats()["retries"], 1)
            # The last force-open holds until it expires.
            self.assertLess(time.time(), expires, "the test was too slow to check the override before its expiry")
            with self.assertRaises(fusebox.ForcedOpenError):
                forced.call(lambda a: calls.append("forced"))
            self.assertNotIn("forced", calls)
            self.assertFalse(forced.status().from_agent)
            eventually(lambda: forced.status().override == fusebox.OVERRIDE_NONE, 15, "the override to expire")
            self.assertGreaterEqual(time.time(), expires)
            self.assertEqual(forced.call(lambda a: "ok"), "ok")

            # The agent comes back: the client reconnects and reports to it.
            self.agent.start()
            eventually(lambda: self.client.agent_connected, 15, "the client to reconnect")
            eventually(lambda: plain.status().from_agent, 10, "the new agent's snapshot")
            for _ in range(7):
                plain.call(lambda a: "ok")
            eventually(lambda: self.agent.window("fb-plain", "successes") >= 7, 10, "the new agent to count the calls")
        eventually(lambda: len(self.agent_events) >= 3, 10, "on_agent_change to be told of the reconnection")
        self.assertEqual([(e.connected, e.node) for e in self.agent_events], [(True, "a3"), (False, ""), (True, "a3")])
        self.assertTrue(self.agent_events[1].error, "the event says why the session ended")
        forced_changes = [(c.before.override, c.after.override, c.after.from_agent)
                          for c in self.state_changes if c.dependency == "fb-forced"]
        self.assertIn(("none", "forced-open", True), forced_changes)
        self.assertIn(("forced-open", "forced-open", False), forced_changes, "the agent went: the local breaker decides")
        self.assertIn(("forced-open", "none", False), forced_changes, "the override expired")
        text = "\n".join(logs.output)
        self.assertIn("unreachable", text)
        self.assertIn("deciding locally", text)
        self.assertIn("connected to agent a3", text)
        self.assertEqual(sum("unreachable" in line for line in logs.output), 1, "one line per fallback: " + text)

    def test_a_paused_agent_never_hangs_a_call(self):
        plain = self.dep("fb-slow")
        port = closed_port()
        tries = []

        def flaky(a):
            tries.append(a.number)
            if len(tries) == 1:
                return connect(port, a.timeout)
            return "ok"

        self.agent.pause()
        self.addCleanup(self.agent.resume)
        start = time.monotonic()
        # Without agent_wait these would wait for the paused agent until
        # their 5 s deadline and fail.
        self.assertEqual(plain.call(flaky, fusebox.IDEMPOTENT, timeout=5), "ok")
        self.assertEqual(plain.call(lambda a: "ok", strict=True, timeout=5), "ok")
        took = time.monotonic() - start
        self.assertLess(took, 3.0, "AcquireRetry and Check wait at most agent_wait (50 ms) each; took %.2fs" % took)
        self.assertEqual(tries, [1, 2])
        s = self.client._session
        self.assertEqual((s.fallbacks["acquire_retry"], s.fallbacks["check"]), (1, 1))
