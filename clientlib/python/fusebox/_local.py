"""The local fallback breaker: the Go engine's rules (package sharedstate)
for one dependency with this process as the only node.

It is fed the same counts as the agent (every flush, while the agent is
there too, so that it is warm when the agent goes away). While the agent
decides, it follows the agent's breaker (follow): its state, generation,
since and open count, with no trip of its own, so that when the agent goes
away it starts from the fleet's present state. It decides while the agent
is away: the trip rule on the whole window and, with fastPath,
on its freshest suffixes (Wilson lower bounds at the policy's confidence),
open for openDuration doubling per open in a row up to maxOpenDuration,
half-open probes one at a time in rounds of probeTimeout, closed after
probeSuccessThreshold successes (with a fresh window), and the retry
budget max(minRetriesPerSecond * window, ratio * firstAttempts) over the
window.
"""

import dataclasses
import math
import statistics
import threading
import time

from . import _policy as P

WINDOW_BUCKETS = 10
FAST_HORIZONS = 7
FAST_SUB_BUCKETS = 100
_FINE_SLOTS = 1 << (FAST_HORIZONS - 1)

# Counter indexes of a window bucket.
FIRST, RETRIES, SUCCESSES, FAILURES, SLOW, REJECTED = range(6)


def wilson_lower(k, n, z):
    """Lower bound of the Wilson score interval of k/n at z (0 when n is 0)."""
    if n == 0:
        return 0.0
    p = min(k, n) / n
    z2 = z * z
    lb = (p + z2 / (2 * n) - z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (1 + z2 / n)
    return max(0.0, lb)


def trip_bounds(b):
    """The z values of the policy's confidence: (whole window, fast-path
    suffix); (0, 0) for the classic rule."""
    c = b.confidence
    if not 0 < c < 1:
        return 0.0, 0.0
    nd = statistics.NormalDist()
    return (nd.inv_cdf(1 - (1 - c) / (2 * WINDOW_BUCKETS)),
            nd.inv_cdf(1 - (1 - c) / (2 * FAST_HORIZONS * WINDOW_BUCKETS)))


def _node_failing(b, successes, failures, slow):
    req = successes + failures
    return (failures > 0 and failures >= b.failure_rate_threshold * req) or \
        (slow > 0 and slow >= b.slow_call_rate_threshold * req)


def _bound_trips(b, z, successes, failures, slow):
    req = successes + failures
    if failures > 0 and wilson_lower(failures, req, z) >= b.failure_rate_threshold:
        return True
    return slow > 0 and wilson_lower(slow, req, z) >= b.slow_call_rate_threshold


def trips(b, z, counts, recent):
    """Whether one node's counts trip the breaker: counts are the window's
    (successes, failures, slow calls), recent the same for the freshest 1,
    2, 4, ... 64 sub-buckets (each including the one before)."""
    zw, zf = z
    s, f, sl = counts
    if b.fast_path and zf > 0 and (f >= b.failure_rate_threshold * b.minimum_requests or
                                   sl >= b.slow_call_rate_threshold * b.minimum_requests):
        for rs, rf, rsl in recent:
            if rs + rf >= max(b.minimum_requests, 1) and _node_failing(b, rs, rf, rsl) and \
                    _bound_trips(b, zf, rs, rf, rsl):
                return True
    req = s + f
    if req == 0 or req < b.minimum_requests or not _node_failing(b, s, f, sl):
        return False
    if zw == 0:  # the classic rule
        return (f > 0 and f / req >= b.failure_rate_threshold) or \
            (sl > 0 and min(sl, req) / req >= b.slow_call_rate_threshold)
    return _bound_trips(b, zw, s, f, sl)


class _Window:
    """Counts over the last window in WINDOW_BUCKETS buckets, and successes,
    failures and slow calls in sub-buckets of window/FAST_SUB_BUCKETS for
    the fast path."""

    def __init__(self, window):
        self.width = window / WINDOW_BUCKETS
        self.fine_width = window / FAST_SUB_BUCKETS
        self.ep = [-1] * WINDOW_BUCKETS
        self.c = [[0] * 6 for _ in range(WINDOW_BUCKETS)]
        self.fep = [-1] * _FINE_SLOTS
        self.fc = [[0, 0, 0] for _ in range(_FINE_SLOTS)]

    def add(self, now, counts):
        e = int(now // self.width)
        i = e % WINDOW_BUCKETS
        if self.ep[i] != e:
            self.ep[i], self.c[i] = e, [0] * 6
        b = self.c[i]
        for k in range(6):
            b[k] += counts[k]
        if counts[SUCCESSES] or counts[FAILURES] or counts[SLOW]:
            fe = int(now // self.fine_width)
            j = fe % _FINE_SLOTS
            if self.fep[j] != fe:
                self.fep[j], self.fc[j] = fe, [0, 0, 0]
            fb = self.fc[j]
            fb[0] += counts[SUCCESSES]
            fb[1] += counts[FAILURES]
            fb[2] += counts[SLOW]

    def totals(self, now):
        e = int(now // self.width)
        out = [0] * 6
        for i in range(WINDOW_BUCKETS):
            if e - WINDOW_BUCKETS < self.ep[i] <= e:
                for k in range(6):
                    out[k] += self.c[i][k]
        return out

    def recent(self, now):
        fe = int(now // self.fine_width)
        out, acc, k = [], [0, 0, 0], 0
        for i in range(_FINE_SLOTS):
            e = fe - i
            j = e % _FINE_SLOTS
            if e >= 0 and self.fep[j] == e:
                for x in range(3):
                    acc[x] += self.fc[j][x]
            if i == (1 << k) - 1:
                out.append(tuple(acc))
                k += 1
        return out


class LocalBreaker:
    """The local breaker and retry budget of one dependency. Thread-safe.

    clock() returns monotonic seconds; wall() Unix seconds (for the
    snapshot's since)."""

    def __init__(self, name, policy, clock=time.monotonic, wall=time.time):
        self.name = name
        self._clock, self._wall = clock, wall
        self._mu = threading.Lock()
        self._pol = policy
        self._z = trip_bounds(policy.breaker)
        self._win = _Window(policy.breaker.window)
        self._state = P.CLOSED  # CLOSED or OPEN; half-open is derived
        self._since = clock()
        self._since_wall = 0.0
        self._open_count = 0
        self._generation = 0
        self._probe_in_flight = False
        self._probe_round = 0
        self._probe_successes = 0
        # While the agent decides, the breaker follows the agent's (follow):
        # no trip rule of its own, and the open duration is the followed
        # breaker's (None: the policy's for _open_count).
        self._followed = False
        self._open_for = None
        self._snap = None
        self._publish(clock())

    @property
    def policy(self):
        return self._pol

    def set_policy(self, policy):
        with self._mu:
            if policy == self._pol:
                return
            if policy.breaker.window != self._pol.breaker.window:
                self._win = _Window(policy.breaker.window)
            self._pol = policy
            self._z = trip_bounds(policy.breaker)
            self._publish(self._clock())

    def add(self, counts):
        """Add counts (first, retries, successes, failures, slow, rejected)."""
        with self._mu:
            self._win.add(self._clock(), counts)

    def totals(self):
        with self._mu:
            return self._win.totals(self._clock())

    # --- state ---

    def _open_duration(self):
        if self._open_for is not None:
            return self._open_for
        return self._pol.breaker.open_duration_for(self._open_count)

    def _state_at(self, now):
        if self._state != P.OPEN:
            return P.CLOSED
        if now < self._since + self._open_duration():
            return P.OPEN
        return P.HALF_OPEN

    def _round(self, now):
        """The probe round at now and when it ends."""
        b = self._pol.breaker
        start = self._since + self._open_duration()
        if now < start:
            return 0, start + b.probe_timeout
        n = int((now - start) // b.probe_timeout)
        return n, start + (n + 1) * b.probe_timeout

    def _transition(self, now, state, open_count):
        self._state, self._open_count = state, open_count
        self._since, self._since_wall = now, self._wall()
        self._generation += 1
        self._open_for = None
        self._probe_in_flight, self._probe_successes = False, 0
        if state == P.CLOSED:
            # Start afresh, so that the failures that opened the breaker do
            # not trip it again.
            self._win = _Window(self._pol.breaker.window)

    def _refresh(self, now):
        if self._probe_in_flight:
            if self._state_at(now) != P.HALF_OPEN or self._round(now)[0] != self._probe_round:
                self._probe_in_flight = False

    def tick(self):
        """Apply the rules that depend on time and counts; True when the
        snapshot changed."""
        with self._mu:
            now = self._clock()
            self._refresh(now)
            if not self._followed and self._state_at(now) == P.CLOSED:
                t = self._win.totals(now)
                if trips(self._pol.breaker, self._z, (t[SUCCESSES], t[FAILURES], t[SLOW]), self._win.recent(now)):
                    self._transition(now, P.OPEN, 1)
            return self._publish(now)

    def follow(self, snap):
        """Take the breaker state of snap, a Snapshot from the agent, and
        keep it: until unfollow, tick applies no trip rule. The breaker
        becomes snap's state (half-open is open whose open duration has
        passed), generation, since (one in the future counts from now) and
        open count, open for the fleet's open duration under scope fleet
        or zone (the policy's fleet_max_open_duration caps its doubling).
        When it is closed anew (another generation, or it was not closed)
        less than one window ago, the window starts afresh: the failures
        it holds are the ones the fleet closed on. The agent's node-local
        state is not followed (this breaker has none). True when the
        snapshot changed."""
        with self._mu:
            now, wall = self._clock(), self._wall()
            self._followed = True
            b = self._pol.breaker
            state = P.CLOSED if snap.state == P.CLOSED else P.OPEN
            open_count = snap.open_count if state == P.OPEN else 0
            since_wall = min(snap.since, wall)
            if (state, snap.generation, open_count, since_wall) == \
                    (self._state, self._generation, self._open_count, self._since_wall):
                return self._publish(now)
            closed_anew = state == P.CLOSED and (self._state != P.CLOSED or self._generation != snap.generation)
            self._state, self._generation, self._open_count = state, snap.generation, open_count
            self._since, self._since_wall = now - (wall - since_wall), since_wall
            self._open_for = None
            if state == P.OPEN:
                self._open_for = b.open_duration_for(open_count) if snap.scope == P.SCOPE_NODE \
                    else b.fleet_open_duration_for(open_count)
            self._probe_in_flight, self._probe_successes = False, 0
            if closed_anew and wall - since_wall < b.window:
                self._win = _Window(b.window)
            return self._publish(now)

    def unfollow(self):
        """End follow: the breaker goes on by its own rules from the state
        it followed last."""
        with self._mu:
            self._followed = False

    def _publish(self, now):
        st = self._state_at(now)
        rnd = self._round(now)[0] if st == P.HALF_OPEN else 0
        b, r = self._pol.breaker, self._pol.retry
        s = P.Snapshot(dependency=self.name, state=st, local_state=P.CLOSED, generation=self._generation,
                       open_count=self._open_count, probe_round=rnd, probe_permit=st == P.HALF_OPEN,
                       since=self._since_wall, mode=b.mode, scope=b.scope,
                       slow_call_duration=b.slow_call_duration, retry=r)
        old = self._snap
        if old is not None and dataclasses.replace(s, version=old.version) == old:
            return False
        s = dataclasses.replace(s, version=old.version + 1 if old is not None else 1)
        self._snap = s
        return True

    def snapshot(self):
        return self._snap

    # --- decisions ---

    def _decide(self, now, kind):
        """(verdict, reason) for kind "first", "retry" or "probe"."""
        st = self._state_at(now)
        if st == P.OPEN:
            d = (P.REJECT, P.REASON_OPEN)
        elif st == P.HALF_OPEN:
            _, end = self._round(now)
            if kind == "retry" or self._probe_in_flight or now + self._pol.retry.per_attempt_timeout > end:
                d = (P.REJECT, P.REASON_NO_PERMIT)
            else:
                d = (P.ALLOW_PROBE, "")
        elif kind == "retry" and not self._retry_admitted(now):
            d = (P.REJECT, P.REASON_BUDGET)
        else:
            d = (P.ALLOW, "")
        if self._pol.breaker.mode == P.SHADOW and d[0] == P.REJECT:
            return P.ALLOW, d[1]
        return d

    def _retry_admitted(self, now):
        t = self._win.totals(now)
        bp = self._pol.retry
        budget = max(bp.budget_min_retries_per_second * self._pol.breaker.window, bp.budget_ratio * t[FIRST])
        return t[RETRIES] < budget

    def decide(self, kind="first"):
        """Decide without counting or reserving anything."""
        with self._mu:
            now = self._clock()
            self._refresh(now)
            return self._decide(now, kind)

    def acquire(self, kind):
        """Decide a "retry" or "probe" and take it: an allowed retry counts
        as a retry, an allowed probe (or a normal call) as a first attempt,
        a refusal as rejected. An ALLOW_PROBE holds the probe slot until
        probe_result, the end of the round or a state change."""
        with self._mu:
            now = self._clock()
            self._refresh(now)
            v, reason = self._decide(now, kind)
            c = [0] * 6
            if v == P.REJECT:
                c[REJECTED] = 1
            elif kind == "retry":
                c[RETRIES] = 1
            else:
                c[FIRST] = 1
            self._win.add(now, c)
            if v == P.ALLOW_PROBE:
                self._probe_in_flight = True
                self._probe_round = self._round(now)[0]
            changed = self._publish(now)
            return v, reason, changed

    def probe_result(self, success):
        """Report the probe acquire granted: a failure opens again (openCount
        + 1), probeSuccessThreshold successes close. True when the snapshot
        changed."""
        with self._mu:
            now = self._clock()
            self._refresh(now)
            if self._probe_in_flight and self._state_at(now) == P.HALF_OPEN:
                self._probe_in_flight = False
                if not success:
                    self._transition(now, P.OPEN, self._open_count + 1)
                else:
                    self._probe_successes += 1
                    if self._probe_successes >= self._pol.breaker.probe_success_threshold:
                        self._transition(now, P.CLOSED, 0)
            return self._publish(now)
