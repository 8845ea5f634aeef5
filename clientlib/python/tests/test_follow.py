"""Where the local fallback starts from when the agent goes away: the
fleet's present state, which the local breaker follows while the agent
decides (on a fake clock, with a fake agent session)."""

import dataclasses
import unittest

import fusebox
from fusebox import _local as L
from fusebox import _policy as P
from fusebox.v1 import fusebox_pb2 as pb

from .test_calls import FakeSession, FakeTime, Flaky, new_client, pushed
from .test_local import counts, policy


class FollowTest(unittest.TestCase):
    """LocalBreaker.follow and unfollow."""

    def setUp(self):
        self.ft = FakeTime()
        self.b = L.LocalBreaker("dep", policy(minimum_requests=10, open_duration=5.0, max_open_duration=60.0,
                                              fleet_max_open_duration=60.0, probe_success_threshold=3),
                                clock=self.ft.clock, wall=self.ft.wall)

    def snap(self, state, generation, open_count=0, ago=0.0, **kw):
        return P.Snapshot("dep", state=state, generation=generation, open_count=open_count,
                          since=self.ft.w - ago, **kw)

    def test_a_followed_close_replaces_its_own_trip_and_it_trips_no_more_until_unfollow(self):
        self.b.add(counts(first=20, failures=20))
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.OPEN, "its own trip")
        self.ft.advance(180)
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.HALF_OPEN)
        self.b.follow(self.snap(P.CLOSED, 4, ago=1.0))
        s = self.b.snapshot()
        self.assertEqual((s.state, s.generation, s.since), (P.CLOSED, 4, self.ft.w - 1.0))
        self.assertEqual(self.b.decide(), (P.ALLOW, ""))
        self.assertEqual(self.b.totals()[L.FAILURES], 0, "a close less than a window ago starts a fresh window")
        self.b.add(counts(first=20, failures=20))
        self.b.tick()
        self.assertEqual(self.b.snapshot().state, P.CLOSED, "no trip of its own while it follows")
        self.b.unfollow()
        self.b.tick()
        s = self.b.snapshot()
        self.assertEqual((s.state, s.generation), (P.OPEN, 5), "its own rules again, from the followed state")

    def test_a_close_older_than_a_window_keeps_the_window(self):
        self.b.add(counts(first=5, failures=5))
        self.b.follow(self.snap(P.CLOSED, 2, ago=60.0))
        self.assertEqual(self.b.totals()[L.FAILURES], 5)

    def test_an_open_breaker_keeps_its_remaining_time(self):
        # The fleet's second open in a row, 2 s ago: 10 s in all.
        self.b.follow(self.snap(P.OPEN, 3, open_count=2, ago=2.0))
        self.b.unfollow()
        s = self.b.snapshot()
        self.assertEqual((s.state, s.generation, s.since), (P.OPEN, 3, self.ft.w - 2.0))
        self.ft.advance(8 - 0.001)
        self.assertEqual(self.b.decide(), (P.REJECT, P.REASON_OPEN))
        self.ft.advance(0.001)
        self.assertEqual(self.b.acquire("probe")[0], P.ALLOW_PROBE)

    def test_the_fleets_open_duration_caps_the_doubling(self):
        b = L.LocalBreaker("dep", policy(open_duration=5.0, max_open_duration=120.0, fleet_max_open_duration=20.0),
                           clock=self.ft.clock, wall=self.ft.wall)
        b.follow(self.snap(P.OPEN, 9, open_count=6))  # 5 s doubled 5 times: 160 s, capped at 20 s
        self.ft.advance(20)
        self.assertEqual(b.decide(), (P.ALLOW_PROBE, ""))
        node = L.LocalBreaker("dep", policy(open_duration=5.0, max_open_duration=120.0, fleet_max_open_duration=20.0,
                                            scope=P.SCOPE_NODE), clock=self.ft.clock, wall=self.ft.wall)
        node.follow(self.snap(P.OPEN, 0, open_count=6, scope=P.SCOPE_NODE))  # scope node: up to max_open_duration
        self.ft.advance(100)
        self.assertEqual(node.decide(), (P.REJECT, P.REASON_OPEN))

    def test_half_open_and_a_since_in_the_future(self):
        self.b.follow(self.snap(P.HALF_OPEN, 3, open_count=1, ago=6.0))
        self.assertEqual(self.b.snapshot().state, P.HALF_OPEN)
        self.b.follow(self.snap(P.OPEN, 4, open_count=1, ago=-3600.0))
        s = self.b.snapshot()
        self.assertEqual((s.state, s.since), (P.OPEN, self.ft.w), "a since in the future counts from now")


class FallbackStartTest(unittest.TestCase):
    """The fleet trips, the local breaker with it; the fleet recovers; the
    agent goes away minutes later: no call is refused."""

    def setUp(self):
        self.ft = FakeTime()
        self.c = new_client(self.ft)
        self.c._pb = pb
        self.s = FakeSession({})
        self.c._session = self.s
        self.addCleanup(self.c.close)
        self.d = self.c.dependency("payments")
        self.policy = {"breaker": {"minimumRequests": 5, "failureRateThreshold": 0.6, "confidence": 0,
                                   "fastPath": False, "openDuration": "5s", "fleetMaxOpenDuration": "1m0s"}}
        self.version = 0

    def push(self, state, generation, open_count=0, since=None):
        self.version += 1
        m = pushed("payments", state=state, generation=generation, open_count=open_count, version=self.version,
                   policy=self.policy)
        if since is not None:
            m.since.FromNanoseconds(int(since * 1e9))
        self.d._apply_agent_snapshot(m, True)

    def test_the_fallback_starts_from_the_fleets_close(self):
        self.push(pb.BREAKER_STATE_CLOSED, 0)
        # The dependency fails: the fleet trips, and the local breaker, fed
        # the same failures at each flush, opens too.
        for _ in range(5):
            with self.assertRaises(ConnectionRefusedError):
                self.d.call(Flaky(ConnectionRefusedError("down")))
        self.c._flush()
        tripped = self.ft.w
        self.push(pb.BREAKER_STATE_OPEN, 1, open_count=1, since=tripped)
        self.c._flush()
        self.assertEqual(self.d._local.snapshot().state, P.OPEN, "the local breaker opened with the fleet's")
        # The fleet recovers: half-open after 5 s, closed by probes.
        self.ft.advance(5)
        self.push(pb.BREAKER_STATE_HALF_OPEN, 1, open_count=1, since=tripped)
        self.ft.advance(2)
        closed = self.ft.w
        self.push(pb.BREAKER_STATE_CLOSED, 2, since=closed)
        self.c._flush()
        st = self.d.status()
        self.assertEqual((st.state, st.generation, st.from_agent), (P.CLOSED, 2, True))

        # Three minutes later the agent goes away.
        for _ in range(180 * 20):
            self.ft.advance(0.05)
            self.c._flush()
        self.s.connected = False
        self.d._disconnected()
        st = self.d.status()
        self.assertEqual((st.state, st.generation, st.since, st.from_agent), (P.CLOSED, 2, closed, False),
                         "the local breaker starts from the fleet's close")
        # Two calls at once (the second made while the first is in flight):
        # a local breaker left half-open by its own trip would admit the
        # first as its one probe and refuse the second.
        inner = []
        self.assertEqual(self.d.call(lambda a: inner.append(self.d.call(Flaky())) or "outer"), "outer")
        self.assertEqual(inner, ["ok"])
        for _ in range(5):
            self.assertEqual(self.d.call(Flaky()), "ok")

    def test_the_fallback_keeps_the_fleets_open_breaker(self):
        opened = self.ft.w - 2
        self.push(pb.BREAKER_STATE_OPEN, 3, open_count=1, since=opened)
        self.s.connected = False
        self.d._disconnected()
        st = self.d.status()
        self.assertEqual((st.state, st.generation, st.since, st.from_agent), (P.OPEN, 3, opened, False))
        f = Flaky()
        with self.assertRaises(fusebox.OpenError):
            self.d.call(f)
        self.ft.advance(3)  # the fleet's 5 s are over
        self.c._flush()
        self.assertEqual(self.d.status().state, P.HALF_OPEN)
        self.assertEqual(self.d.call(f), "ok")
        self.assertEqual(len(f.attempts), 1)


if __name__ == "__main__":
    unittest.main()
