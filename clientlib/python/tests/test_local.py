"""The local fallback breaker and budget, on a fake clock."""

import dataclasses
import unittest

from fusebox import _local as L
from fusebox import _policy as P


class FakeClock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t

    def advance(self, d):
        self.t += d


def policy(**breaker):
    return P.Policy(breaker=dataclasses.replace(P.BreakerSettings(), **breaker))


def counts(first=0, retries=0, successes=0, failures=0, slow=0, rejected=0):
    return (first, retries, successes, failures, slow, rejected)


class TripRuleTest(unittest.TestCase):
    def test_wilson_lower_bound(self):
        self.assertEqual(L.wilson_lower(0, 0, 1.96), 0)
        self.assertAlmostEqual(L.wilson_lower(50, 100, 1.96), 0.4038, places=3)
        # At 95% (z 2.81 over the window) 17 failures of 20 trip a 0.5
        # threshold, 16 do not: the figures of the Go engine's doc.
        zw, zf = L.trip_bounds(P.BreakerSettings())
        self.assertAlmostEqual(zw, 2.807, places=2)
        self.assertAlmostEqual(zf, 3.38, places=2)
        self.assertGreaterEqual(L.wilson_lower(17, 20, zw), 0.5)
        self.assertLess(L.wilson_lower(16, 20, zw), 0.5)

    def test_classic_rule(self):
        b = P.BreakerSettings(confidence=0, fast_path=False, minimum_requests=10)
        z = L.trip_bounds(b)
        self.assertFalse(L.trips(b, z, (0, 9, 0), []), "9 requests are below minimum_requests")
        self.assertTrue(L.trips(b, z, (5, 5, 0), []))
        self.assertFalse(L.trips(b, z, (6, 4, 0), []))

    def test_fast_path_sees_a_fresh_death(self):
        # The whole window holds the successes from before; its freshest
        # suffix holds only failures.
        b = P.BreakerSettings(minimum_requests=20)
        z = L.trip_bounds(b)
        whole = (200, 30, 0)
        self.assertFalse(L.trips(dataclasses.replace(b, fast_path=False), z, whole, [(0, 30, 0)] * 7))
        self.assertTrue(L.trips(b, z, whole, [(0, 30, 0)] * 7))


class LocalBreakerTest(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        self.b = L.LocalBreaker("dep", policy(minimum_requests=10, open_duration=1.0, max_open_duration=4.0,
                                              probe_success_threshold=2, probe_timeout=2.0),
                                clock=self.clock, wall=lambda: 0.0)

    def trip(self):
        self.b.add(counts(first=20, failures=20))
        self.assertTrue(self.b.tick())
        self.assertEqual(self.b.snapshot().state, P.OPEN)

    def test_closed_until_enough_failures(self):
        self.b.add(counts(first=9, failures=9))
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.CLOSED)
        self.assertEqual(self.b.decide(), (P.ALLOW, ""))
        self.b.add(counts(first=11, failures=11))
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.OPEN)
        self.assertEqual(self.b.decide(), (P.REJECT, P.REASON_OPEN))
        self.assertEqual(self.b.snapshot().decide_first(), (P.REJECT, P.REASON_OPEN))

    def test_failures_age_out_of_the_window(self):
        self.b.add(counts(first=9, failures=9))
        self.clock.advance(11)
        self.b.add(counts(first=9, failures=9))
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.CLOSED)

    def test_half_open_one_probe_at_a_time_then_closed(self):
        self.trip()
        self.clock.advance(1.0)
        self.b.tick()
        s = self.b.snapshot()
        self.assertEqual((s.state, s.probe_permit), (P.HALF_OPEN, True))
        self.assertEqual(s.decide_first(), (P.ALLOW_PROBE, ""))
        self.assertEqual(self.b.acquire("retry")[:2], (P.REJECT, P.REASON_NO_PERMIT), "no retry while half-open")
        self.assertEqual(self.b.acquire("probe")[:2], (P.ALLOW_PROBE, ""))
        self.assertEqual(self.b.acquire("probe")[:2], (P.REJECT, P.REASON_NO_PERMIT), "one probe at a time")
        self.b.probe_result(True)
        self.assertEqual(self.b.snapshot().state, P.HALF_OPEN, "one success of two")
        self.assertEqual(self.b.acquire("probe")[:2], (P.ALLOW_PROBE, ""))
        self.b.probe_result(True)
        s = self.b.snapshot()
        self.assertEqual(s.state, P.CLOSED)
        self.assertEqual(s.generation, 2)
        self.assertEqual(self.b.totals()[L.FAILURES], 0, "a closed breaker starts a fresh window")

    def test_failed_probe_opens_for_twice_as_long_up_to_the_cap(self):
        self.trip()
        waits = []
        for _ in range(4):
            start = self.clock.t
            while self.b.acquire("probe")[0] != P.ALLOW_PROBE:
                self.clock.advance(0.25)
            waits.append(self.clock.t - start)
            self.b.probe_result(False)
            self.assertEqual(self.b.snapshot().state, P.OPEN)
        self.assertEqual(waits, [1.0, 2.0, 4.0, 4.0])

    def test_a_lost_probe_is_released_with_its_round(self):
        self.trip()
        self.clock.advance(1.0)
        self.assertEqual(self.b.acquire("probe")[0], P.ALLOW_PROBE)
        self.assertEqual(self.b.acquire("probe")[0], P.REJECT)
        self.clock.advance(2.0)  # probe_timeout: the next round
        self.assertEqual(self.b.acquire("probe")[0], P.ALLOW_PROBE)

    def test_no_probe_that_cannot_finish_in_its_round(self):
        self.trip()
        self.clock.advance(1.0 + 1.7)  # 0.3 s left in the round, attempts take up to 0.5 s
        self.assertEqual(self.b.acquire("probe")[:2], (P.REJECT, P.REASON_NO_PERMIT))

    def test_retry_budget(self):
        # budget = max(minRetriesPerSecond * window, ratio * firstAttempts)
        b = L.LocalBreaker("dep", P.Policy(retry=P.RetrySettings(budget_ratio=0.1, budget_min_retries_per_second=0.5)),
                           clock=self.clock)
        b.add(counts(first=100, successes=100))
        got = sum(1 for _ in range(50) if b.acquire("retry")[0] == P.ALLOW)
        self.assertEqual(got, 10)
        self.assertEqual(b.acquire("retry")[:2], (P.REJECT, P.REASON_BUDGET))
        self.assertEqual(b.totals()[L.RETRIES], 10)
        self.assertEqual(b.totals()[L.REJECTED], 41)
        idle = L.LocalBreaker("idle", P.Policy(retry=P.RetrySettings(budget_ratio=0.1, budget_min_retries_per_second=0.5)),
                              clock=self.clock)
        self.assertEqual(sum(1 for _ in range(50) if idle.acquire("retry")[0] == P.ALLOW), 5, "the floor: 0.5/s over 10 s")

    def test_shadow_mode_never_rejects(self):
        b = L.LocalBreaker("dep", policy(minimum_requests=10, mode=P.SHADOW), clock=self.clock)
        b.add(counts(first=20, failures=20))
        b.tick()
        s = b.snapshot()
        self.assertEqual(s.state, P.OPEN)
        self.assertEqual(s.decide_first(), (P.ALLOW, P.REASON_OPEN))
        self.assertEqual(b.acquire("retry")[0], P.ALLOW)

    def test_a_new_window_length_starts_a_new_window(self):
        self.b.add(counts(first=9, failures=9))
        self.b.set_policy(policy(minimum_requests=10, window=20.0))
        self.b.add(counts(first=9, failures=9))
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.CLOSED)
        self.assertEqual(self.b.totals()[L.FAILURES], 9)


class SnapshotTest(unittest.TestCase):
    def test_decide_first(self):
        S = P.Snapshot
        for snap, want in [
            (S("d"), (P.ALLOW, "")),
            (S("d", state=P.OPEN), (P.REJECT, P.REASON_OPEN)),
            (S("d", state=P.OPEN, override=P.FORCED_CLOSED), (P.ALLOW, "")),
            (S("d", override=P.FORCED_OPEN), (P.REJECT, P.REASON_FORCED_OPEN)),
            (S("d", override=P.FORCED_OPEN, mode=P.SHADOW), (P.REJECT, P.REASON_FORCED_OPEN)),
            (S("d", state=P.HALF_OPEN), (P.REJECT, P.REASON_NO_PERMIT)),
            (S("d", state=P.HALF_OPEN, probe_permit=True), (P.ALLOW_PROBE, "")),
            (S("d", local_state=P.OPEN), (P.REJECT, P.REASON_OPEN)),
            (S("d", local_state=P.HALF_OPEN, probe_permit=True), (P.ALLOW_PROBE, "")),
            (S("d", state=P.OPEN, mode=P.SHADOW), (P.ALLOW, P.REASON_OPEN)),
        ]:
            with self.subTest(snap=snap):
                self.assertEqual(snap.decide_first(), want)

    def test_open_duration_for(self):
        b = P.BreakerSettings(open_duration=5, max_open_duration=120)
        self.assertEqual([b.open_duration_for(n) for n in (0, 1, 2, 3, 6, 7, 100)], [5, 5, 10, 20, 120, 120, 120])

    def test_policy_from_json_reads_the_pushed_document(self):
        from .test_calls import policy_json
        p = P.policy_from_json(policy_json(
            breaker={"mode": "shadow", "scope": "node", "slowCallDuration": "300ms", "minimumRequests": 7,
                     "window": "1m30s", "confidence": 0},
            retry={"maxAttempts": 5, "perAttemptTimeout": "250ms", "budget": {"ratio": 0, "minRetriesPerSecond": 1},
                   "backoff": {"base": "1.5s", "max": "2h0m0s", "jitter": "none"}, "hedge": {"delay": "20ms", "maxHedges": 2}}))
        self.assertEqual((p.breaker.mode, p.breaker.scope, p.breaker.slow_call_duration), (P.SHADOW, P.SCOPE_NODE, 0.3))
        self.assertEqual((p.breaker.minimum_requests, p.breaker.window, p.breaker.confidence), (7, 90.0, 0.0))
        self.assertEqual((p.breaker.failure_rate_threshold, p.breaker.open_duration, p.breaker.fast_path), (0.5, 2.0, True))
        self.assertEqual((p.retry.max_attempts, p.retry.per_attempt_timeout, p.retry.jitter), (5, 0.25, "none"))
        self.assertEqual((p.retry.backoff_base, p.retry.backoff_max), (1.5, 7200.0))
        self.assertEqual((p.retry.budget_ratio, p.retry.budget_min_retries_per_second), (0, 1), "zero is a value")
        self.assertEqual((p.retry.hedge_delay, p.retry.max_hedges), (0.02, 2))
        for bad in (b"", b"[]", b"{}", policy_json(breaker={"minimumRequests": 0})):
            with self.subTest(doc=bad), self.assertRaises(ValueError):
                P.policy_from_json(bad)

    def test_go_duration(self):
        for text, want in (("0s", 0), ("0", 0), ("500ms", 0.5), ("1m30s", 90), ("2h0m0s", 7200), ("1.5µs", 1.5e-6),
                           ("100ns", 1e-7), ("-1s", -1)):
            self.assertAlmostEqual(P.go_duration(text), want, msg=text)
        for bad in ("", "1", "s", "1x", "1s2"):
            with self.subTest(text=bad), self.assertRaises(ValueError):
                P.go_duration(bad)
