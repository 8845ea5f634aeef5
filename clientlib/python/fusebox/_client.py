"""Client, Dependency and the call loop."""

import contextlib
import contextvars
import dataclasses
import enum
import logging
import os
import queue
import random
import secrets
import socket
import sys
import threading
import time

from . import _backoff
from . import _errors as E
from . import _policy as P
from ._local import LocalBreaker

log = logging.getLogger("fusebox")

VERSION = "clientlib-python/0.1"

ENV_AGENT = "FUSEBOX_AGENT"
ENV_SERVICE = "FUSEBOX_SERVICE"
DEFAULT_AGENT_ADDRESS = "unix:///run/fusebox/agent.sock"

HEADER_RETRY_OWNER = "Fusebox-Retry-Owner"
HEADER_TIMEOUT_MS = "Fusebox-Timeout-Ms"
HEADER_IDEMPOTENCY_KEY = "Idempotency-Key"
HEADER_REPLAYED = E.HEADER_REPLAYED

_MAX_FLUSH_INTERVAL = 0.05
_MAX_PROPAGATED_TIMEOUT = 86400.0


class Idempotency(enum.Enum):
    """What a call site may safely repeat."""
    #: Made once (the default: the safe one).
    NON_RETRYABLE = "non-retryable"
    #: May be repeated as it is (reads, PUT, DELETE...).
    IDEMPOTENT = "idempotent"
    #: May be repeated because every attempt carries the same idempotency
    #: key (Attempt.idempotency_key), which the server uses to apply it once.
    IDEMPOTENT_WITH_KEY = "idempotent-with-key"


NON_RETRYABLE = Idempotency.NON_RETRYABLE
IDEMPOTENT = Idempotency.IDEMPOTENT
IDEMPOTENT_WITH_KEY = Idempotency.IDEMPOTENT_WITH_KEY

# --- the request context: one retrying layer, propagated deadlines --------

_owner_var = contextvars.ContextVar("fusebox_retry_owner", default=None)
_deadline_var = contextvars.ContextVar("fusebox_deadline", default=None)


@contextlib.contextmanager
def retry_owner(owner):
    """Calls made inside are part of a request whose retries owner owns:
    they make a single attempt (unless nested_retries=True) and pass owner
    on in Fusebox-Retry-Owner. wsgi_middleware does this for requests that
    carry the header."""
    tok = _owner_var.set(owner)
    try:
        yield
    finally:
        _owner_var.reset(tok)


@contextlib.contextmanager
def deadline(seconds, clock=time.monotonic):
    """Calls made inside end within seconds from now (or their own, earlier
    deadline)."""
    d = clock() + seconds
    cur = _deadline_var.get()
    tok = _deadline_var.set(d if cur is None else min(cur, d))
    try:
        yield
    finally:
        _deadline_var.reset(tok)


def _header_safe(s):
    return all(" " < ch < "\x7f" for ch in s)


def wsgi_middleware(app, clock=time.monotonic):
    """Wrap a WSGI app so that calls it makes while handling a request
    follow the request's Fusebox headers: Fusebox-Retry-Owner (the caller
    retries: nested calls make one attempt) and Fusebox-Timeout-Ms (the
    caller's remaining time becomes the calls' deadline). Both apply while
    app(environ, start_response) runs."""
    def wrapped(environ, start_response):
        with contextlib.ExitStack() as stack:
            o = environ.get("HTTP_FUSEBOX_RETRY_OWNER", "")
            if o and len(o) <= 256 and _header_safe(o):
                stack.enter_context(retry_owner(o))
            ms = environ.get("HTTP_FUSEBOX_TIMEOUT_MS", "")
            if ms.isdigit() and 0 < int(ms) <= _MAX_PROPAGATED_TIMEOUT * 1000:
                stack.enter_context(deadline(int(ms) / 1000, clock))
            return app(environ, start_response)
    return wrapped


class Attempt:
    """One attempt, as the attempt function sees it."""
    __slots__ = ("number", "idempotency_key", "probe", "deadline", "_owner", "_clock")

    def __init__(self, number, key, probe, deadline_, owner, clock):
        #: 1 for the first attempt, 2 for the first retry, ...
        self.number = number
        #: The call's key for IDEMPOTENT_WITH_KEY ("" otherwise): the same
        #: on every attempt of one call.
        self.idempotency_key = key
        #: True when this attempt is a half-open probe.
        self.probe = probe
        #: The attempt's deadline on the client's clock (time.monotonic by
        #: default): its own timeout or the call's, whichever is earlier;
        #: None when there is none.
        self.deadline = deadline_
        self._owner, self._clock = owner, clock

    @property
    def timeout(self):
        """Seconds left for this attempt (at least 1 ms), None without a
        deadline: pass it to the I/O the attempt makes."""
        if self.deadline is None:
            return None
        return max(self.deadline - self._clock(), 0.001)

    def headers(self):
        """The attempt's Fusebox headers, for attempt functions that make
        HTTP requests without the requests adapter: Fusebox-Retry-Owner,
        Fusebox-Timeout-Ms (with a deadline) and Idempotency-Key (keyed
        calls)."""
        h = {HEADER_RETRY_OWNER: self._owner}
        if self.deadline is not None:
            h[HEADER_TIMEOUT_MS] = str(max(int((self.deadline - self._clock()) * 1000 + 1e-6), 1))
        if self.idempotency_key:
            h[HEADER_IDEMPOTENCY_KEY] = self.idempotency_key
        return h


@dataclasses.dataclass(frozen=True)
class Status:
    """A dependency's breaker as this client decides from it."""
    dependency: str
    state: str          # "closed", "open" or "half-open": the governing breaker
    local_state: str    # this host's own breaker (the agent's node-local one)
    override: str       # "none", "forced-open" or "forced-closed"
    override_expires: float  # Unix seconds; 0: until cleared (or none)
    shadow: bool        # the policy's mode is shadow: nothing is refused
    generation: int
    since: float        # Unix seconds; 0: unknown
    from_agent: bool    # the agent's snapshot decides (False: the local breaker)
    throttle_probability: float
    concurrency_limit: int

    @property
    def rejecting(self):
        """Whether a first attempt would be refused now (probes aside)."""
        if self.override == P.FORCED_OPEN:
            return True
        if self.override == P.FORCED_CLOSED or self.shadow:
            return False
        return self.state != P.CLOSED or self.local_state != P.CLOSED


@dataclasses.dataclass(frozen=True)
class AgentEvent:
    """Tells on_agent_change that the session with the agent came up
    (node set) or went down (error set)."""
    connected: bool
    node: str = ""
    error: str = ""


@dataclasses.dataclass(frozen=True)
class StateChange:
    """Tells on_state_change that a dependency's Status changed in a way
    that matters to callers (state, local state, override, shadow mode or
    the deciding side)."""
    dependency: str
    before: Status
    after: Status


class _Decision:
    """What the hot path reads: an immutable snapshot and what is derived
    from it once. Replaced (one attribute store) whenever it changes."""
    __slots__ = ("snap", "verdict", "reason", "retry", "slow", "from_agent", "throttle", "shadow_throttle", "ramp",
                 "limit")

    def __init__(self, snap, from_agent):
        self.snap = snap
        self.verdict, self.reason = snap.decide_first()
        r = snap.retry
        self.retry = r
        self.slow = snap.slow_call_duration
        self.from_agent = from_agent
        p = snap.throttle_probability if 0 < snap.throttle_probability <= 1 else 0.0
        # The ramp's part: a draw below it is the ramp's refusal, not the throttle's.
        self.ramp = min(snap.ramp_probability, p) if snap.ramp_probability > 0 else 0.0
        if snap.mode != P.SHADOW:  # shadow mode reports, never refuses
            self.throttle, self.shadow_throttle, self.limit = p, 0.0, max(snap.concurrency_limit, 0)
        else:
            self.throttle, self.shadow_throttle, self.limit = 0.0, p, 0

    def status(self):
        s = self.snap
        return Status(dependency=s.dependency, state=s.state, local_state=s.local_state, override=s.override,
                      override_expires=s.override_expires, shadow=s.mode == P.SHADOW, generation=s.generation,
                      since=s.since, from_agent=self.from_agent, throttle_probability=s.throttle_probability,
                      concurrency_limit=s.concurrency_limit)


class _Grant:
    __slots__ = ("probe", "by_agent", "generation", "slot")

    def __init__(self, probe=False, by_agent=False, generation=0, slot=False):
        self.probe, self.by_agent, self.generation, self.slot = probe, by_agent, generation, slot


_NO_GRANT = _Grant()
_UNSET = object()
_ALLOW = P.ALLOW


class Dependency:
    """The handle on one dependency of this service: get it once with
    Client.dependency and keep it. Safe for concurrent use."""

    def __init__(self, client, name):
        self._c = client
        self.name = name
        self._mu = threading.Lock()  # counters and slots; never held across I/O
        self._slot_cv = threading.Condition(self._mu)
        # Hot-path counters (guarded by _mu).
        self._first = self._success = self._failure = self._slow = self._rejected = 0
        # What the agent or the local breaker admitted or refused (under _mu).
        self._retries_agent = self._retries_local = 0
        self._probes_agent = self._probes_local = 0
        self._rejected_agent = self._rejected_local = 0
        self._shadow_throttled = 0
        self._in_flight = 0
        # State (guarded by _smu): the agent's snapshot, the local breaker,
        # what is kept of the last pushed snapshot for the local mode.
        self._smu = threading.Lock()
        self._agent_snap = None
        self._agent_snap_answer = False
        self._kept = None  # last pushed Snapshot: override, throttle, limit
        # When the kept throttle probability stops applying (client clock):
        # one breaker window after the agent stopped deciding; None while
        # it has not (the snapshot came with no session, as in tests).
        self._kept_throttle_until = None
        self._refused = False
        self._refused_msg = ""
        pol = client._default_policy
        self._policy_seen = False
        self._policy_json = b""  # the policy_json last applied
        self._local = LocalBreaker(name, pol, clock=client._clock, wall=client._wall)
        self._dec = _Decision(self._local.snapshot(), False)
        # Owned by the flusher.
        self._sent_agent = self._sent_local = (0,) * 11
        self._sent_in_flight = 0
        self._in_flight_sent = False

    def __repr__(self):
        return "<fusebox.Dependency %s>" % self.name

    # --- what callers see ---

    def status(self):
        """The breaker as this client currently decides from it."""
        return self._dec.status()

    def stats(self):
        """This process's counts for the dependency since the client started."""
        with self._mu:
            return {"first_attempts": self._first, "successes": self._success, "failures": self._failure,
                    "slow_calls": self._slow, "rejected": self._rejected + self._rejected_agent + self._rejected_local,
                    "retries": self._retries_agent + self._retries_local,
                    "probes": self._probes_agent + self._probes_local,
                    "shadow_throttled": self._shadow_throttled, "in_flight": self._in_flight}

    @property
    def in_flight(self):
        """Calls holding a concurrency slot now (0 without a limit)."""
        return self._in_flight

    def call(self, fn, idempotency=NON_RETRYABLE, **options):
        """Make the call fn stands for through the breaker, with retries as
        idempotency and the policy allow; see Client.call for the options."""
        return self._run(fn, idempotency, **options)

    # --- the call loop ---

    def _run(self, fn, idempotency=NON_RETRYABLE, **options):
        if not options:
            return self._loop(fn, idempotency)
        fallback = options.pop("fallback", None)
        if fallback is None:
            return self._loop(fn, idempotency, **options)
        try:
            return self._loop(fn, idempotency, **options)
        except E.InvalidOptionError:
            raise
        except Exception as exc:
            return fallback(exc)

    def _loop(self, fn, idempotency, timeout=None, deadline=None, max_attempts=None, attempt_timeout=_UNSET,
              idempotency_key=None, classifier=None, strict=False, nested_retries=False, wait_for_slot=0.0):
        deadline_, key = deadline, idempotency_key
        c = self._c
        clock = c._clock
        dec = self._dec
        retry = dec.retry
        n_max = retry.max_attempts
        if max_attempts is not None:
            if not isinstance(max_attempts, int) or max_attempts < 1:
                raise E.InvalidOptionError("fusebox: max_attempts=%r: must be an int of at least 1" % (max_attempts,))
            n_max = max_attempts
        per_attempt = retry.per_attempt_timeout
        if attempt_timeout is not _UNSET:
            if attempt_timeout is None:
                attempt_timeout = 0.0
            if attempt_timeout < 0:
                raise E.InvalidOptionError("fusebox: attempt_timeout=%r: must not be negative" % (attempt_timeout,))
            per_attempt = attempt_timeout
        if wait_for_slot < 0:
            raise E.InvalidOptionError("fusebox: wait_for_slot=%r: must not be negative" % (wait_for_slot,))
        if not isinstance(idempotency, Idempotency):
            raise E.InvalidOptionError("fusebox: idempotency=%r: want an Idempotency" % (idempotency,))
        owner = _owner_var.get()
        nested = owner is not None
        if idempotency is NON_RETRYABLE or (nested and not nested_retries):
            n_max = 1
        if not nested:
            owner = c.service
        k = ""
        if idempotency is IDEMPOTENT_WITH_KEY:
            if key is None:
                k = secrets.token_hex(16)
            elif not key or len(key) > 1024 or not all(" " <= ch < "\x7f" for ch in key):
                raise E.InvalidOptionError("fusebox: idempotency_key=%r: must be 1-1024 bytes of printable ASCII" % (key,))
            else:
                k = key
        classify = classifier or E.default_classifier
        dl = _deadline_var.get()
        if timeout is not None:
            now = clock()
            dl = now + timeout if dl is None else min(dl, now + timeout)
        if deadline_ is not None:
            dl = deadline_ if dl is None else min(dl, deadline_)

        last = None
        prev_wait = 0.0
        n = 1
        slot = False
        try:
            while True:
                if dl is not None and clock() >= dl and last is not None:
                    raise E.DeadlineExceeded(last_error=last) from last
                if n == 1:
                    if dec.verdict is _ALLOW and not (strict or dec.throttle or dec.shadow_throttle or dec.limit):
                        with self._mu:  # the hot path: a closed breaker, nothing to draw or hold
                            self._first += 1
                        g = _NO_GRANT
                    else:
                        g = self._admit_first(dec, strict, wait_for_slot, dl)
                        slot = g.slot
                else:
                    g = self._admit_retry(last)
                start = clock()
                adl = dl
                if per_attempt > 0:
                    adl = start + per_attempt if dl is None else min(dl, start + per_attempt)
                a = Attempt(n, k, g.probe, adl, owner, clock)
                try:
                    value = fn(a)
                except Exception as exc:
                    err = exc
                else:
                    slow = dec.slow > 0 and clock() - start >= dec.slow
                    with self._mu:
                        self._success += 1
                        if slow:
                            self._slow += 1
                    if g.probe:
                        self._finish_probe(g, True, slow)
                    return value
                end = clock()
                elapsed = end - start
                slow = dec.slow > 0 and elapsed >= dec.slow
                last = err
                if dl is not None and end >= dl:
                    # The caller's deadline passed during the attempt: the
                    # dependency did not answer in time.
                    self._record(True, slow)
                    if g.probe:
                        self._finish_probe(g, False, slow)
                    raise E.DeadlineExceeded(last_error=err) from err
                if per_attempt > 0 and end >= adl:
                    cl = E.Classification(retryable=True, failure=True)  # its own timeout: a slow failure
                    slow = True
                else:
                    cl = classify(err)
                self._record(cl.failure, slow)
                if g.probe:
                    self._finish_probe(g, not cl.failure, slow)
                if not cl.retryable or n >= n_max:
                    raise err
                # The backoff, at least the server's Retry-After.
                w = _backoff.wait(retry.backoff_base, retry.backoff_max, retry.jitter, n - 1, prev_wait, c._random())
                prev_wait = w
                w = max(w, cl.retry_after)
                if dl is not None:
                    nxt = clock() + w
                    if (per_attempt > 0 and nxt + per_attempt > dl) or (per_attempt <= 0 and nxt >= dl):
                        raise E.DeadlineExceeded("fusebox: deadline leaves no room for another attempt",
                                                 last_error=err) from err
                if w > 0:
                    c._sleep(w)
                n += 1
        finally:
            if slot:
                self._release_slot()

    def _record(self, failure, slow):
        with self._mu:
            if failure:
                self._failure += 1
            else:
                self._success += 1
            if slow:
                self._slow += 1

    def _reject(self, reason, last=None):
        with self._mu:
            self._rejected += 1
        err = E.rejection(self.name, reason, last)
        return err

    def _admit_first(self, dec, strict, slot_wait, dl):
        verdict, reason = dec.verdict, dec.reason
        ask_agent = dec.from_agent
        if strict:
            verdict, reason, ask_agent = self._check()
        if verdict == P.ALLOW:
            if not strict:
                if dec.throttle > 0:
                    u = self._c._random()
                    if u < dec.throttle:
                        raise self._reject(P.REASON_RAMP if u < dec.ramp else P.REASON_THROTTLED)
                elif dec.shadow_throttle > 0 and self._c._random() < dec.shadow_throttle:
                    with self._mu:
                        self._shadow_throttled += 1
            held = False
            if dec.limit > 0:
                held = self._acquire_slot(slot_wait, dl)
                if held is False:
                    raise self._reject(P.REASON_CONCURRENCY)
            with self._mu:
                self._first += 1
            return _Grant(slot=True) if held else _NO_GRANT
        if verdict == P.ALLOW_PROBE:
            return self._acquire_probe(ask_agent, dec)
        raise self._reject(reason or P.REASON_OPEN)

    # --- concurrency slots ---

    def _acquire_slot(self, wait, dl):
        """Take a slot of this process's share of the concurrency limit,
        waiting at most wait (and not past dl) for one: True when taken,
        None when the limit went away meanwhile (nothing held), False when
        refused."""
        clock = self._c._clock
        end = clock() + wait
        if dl is not None:
            end = min(end, dl)
        with self._slot_cv:
            while True:
                limit = self._dec.limit  # a new share may make room
                if limit <= 0:
                    return None
                if self._in_flight < limit:
                    self._in_flight += 1
                    return True
                left = end - clock()
                if left <= 0:
                    return False
                self._slot_cv.wait(left)

    def _release_slot(self):
        with self._slot_cv:
            self._in_flight -= 1
            self._slot_cv.notify()

    # --- rare paths: the agent's answers, else the local breaker ---

    def _via_agent(self):
        return self._c._session is not None and self._c._session.connected and not self._refused

    def _admit_retry(self, last):
        dec = self._dec
        if dec.verdict == P.REJECT:
            with self._mu:
                self._rejected += 1
            raise E.rejection(self.name, dec.reason, last) from last
        c = self._c
        if self._via_agent():
            d = c._ask(self, "acquire_retry")
            if d is not None:
                if d.verdict == c._pb.VERDICT_REJECT:
                    with self._mu:
                        self._rejected_agent += 1
                    raise E.rejection(self.name, P.REASONS.get(d.reason, P.REASON_OPEN), last) from last
                with self._mu:
                    self._retries_agent += 1
                return _NO_GRANT
        v, reason, changed = self._local.acquire("retry")
        if changed:
            self._publish()
        if v == P.REJECT:
            with self._mu:
                self._rejected_local += 1
            raise E.rejection(self.name, reason, last) from last
        with self._mu:
            self._retries_local += 1
        return _NO_GRANT

    def _acquire_probe(self, ask_agent, dec):
        c = self._c
        if ask_agent and self._via_agent():
            d = c._ask(self, "acquire_probe")
            if d is not None:
                pbm = c._pb
                if d.verdict == pbm.VERDICT_ALLOW_PROBE:
                    with self._mu:
                        self._probes_agent += 1
                    gen = d.snapshot.generation if d.HasField("snapshot") else dec.snap.generation
                    return _Grant(probe=True, by_agent=True, generation=gen)
                if d.verdict == pbm.VERDICT_ALLOW:
                    with self._mu:
                        self._probes_agent += 1  # the agent counted a first attempt
                    return _NO_GRANT
                with self._mu:
                    self._rejected_agent += 1
                raise E.rejection(self.name, P.REASONS.get(d.reason, P.REASON_OPEN))
        v, reason, changed = self._local.acquire("probe")
        if changed:
            self._publish()
        if v == P.ALLOW_PROBE:
            with self._mu:
                self._probes_local += 1
            return _Grant(probe=True)
        if v == P.ALLOW:
            with self._mu:
                self._probes_local += 1
            return _NO_GRANT
        with self._mu:
            self._rejected_local += 1
        raise E.rejection(self.name, reason)

    def _check(self):
        """Decide a first attempt synchronously (strict): (verdict, reason,
        whether the agent answered)."""
        c = self._c
        if self._via_agent():
            d = c._ask(self, "check")
            if d is not None:
                pbm = c._pb
                if d.verdict == pbm.VERDICT_REJECT:
                    return P.REJECT, P.REASONS.get(d.reason, P.REASON_OPEN), True
                if d.verdict == pbm.VERDICT_ALLOW_PROBE:
                    return P.ALLOW_PROBE, "", True
                return P.ALLOW, "", True
        v, reason = self._local.decide("first")
        return v, reason, False

    def _finish_probe(self, g, success, slow):
        # slow: the probe took at least slowCallDuration; the agent judges
        # a slow success as the closed breaker would judge the call.
        if g.by_agent:
            self._c._session_probe_result(self.name, g.generation, success, slow)
        elif self._local.probe_result(success):
            self._publish()

    # --- snapshots ---

    def _local_view(self):
        """The local breaker's snapshot, with what is kept of the agent's
        last one: its override until it expires, its concurrency share, and
        its throttle probability for one breaker window after the agent
        stopped deciding."""
        s = self._local.snapshot()
        k = self._kept
        if k is None:
            return s
        kw = {}
        if k.override != P.OVERRIDE_NONE and (k.override_expires == 0 or k.override_expires > self._c._wall()):
            kw.update(override=k.override, override_reason=k.override_reason, override_expires=k.override_expires)
        if k.concurrency_limit:
            kw["concurrency_limit"] = k.concurrency_limit
        until = self._kept_throttle_until
        # The throttle's probability, not the ramp's after a close (a ramp
        # lasts rampDuration, not a window).
        if k.throttle_probability > k.ramp_probability and not kw.get("override") and s.state == P.CLOSED and \
                (until is None or self._c._clock() < until):
            kw["throttle_probability"] = k.throttle_probability
        return dataclasses.replace(s, **kw) if kw else s

    def _publish(self):
        with self._smu:
            self._publish_locked()

    def _publish_locked(self):
        c = self._c
        if self._agent_snap is not None and c._session is not None and c._session.connected:
            snap, from_agent = self._agent_snap, True
        else:
            snap, from_agent = self._local_view(), False
        old = self._dec
        if old.snap == snap and old.from_agent == from_agent:
            return
        d = _Decision(snap, from_agent)
        with self._slot_cv:
            self._dec = d
            if d.limit != old.limit:
                self._slot_cv.notify_all()  # a waiting call re-reads the limit
        if c._events is not None:
            before, after = old.status(), d.status()
            if (before.state, before.local_state, before.override, before.shadow, before.from_agent) != \
                    (after.state, after.local_state, after.override, after.shadow, after.from_agent):
                c._emit(StateChange(self.name, before, after))

    def _apply_agent_snapshot(self, m, pushed):
        """Install a snapshot from the agent and give its policy to the
        local breaker (an answer's snapshot is under the policy last pushed).
        A pushed one is the agent's latest unless an answer's newer one was
        installed meanwhile; an answer's only when newer."""
        with self._smu:
            held = self._agent_snap
            if pushed:
                if held is not None and self._agent_snap_answer and m.version < held.version:
                    return
            elif held is None or m.version <= held.version:
                return
            if m.policy_json and m.policy_json != self._policy_json:  # pushed ones carry it, answers not
                try:
                    pol = P.policy_from_json(m.policy_json)
                except ValueError:
                    pol = None  # the last one stays
                if pol is not None:
                    self._policy_json = m.policy_json
                    if pol != self._local.policy:
                        self._local.set_policy(pol)
                    self._policy_seen = True
            snap = P.snapshot_from_proto(m, self._local.policy)
            # The local breaker follows the agent's breaker while the agent
            # decides, so that it starts from it when the agent goes (a
            # snapshot given with no session is where it starts from now).
            self._local.follow(snap)
            s = self._c._session
            if s is None or not s.connected:
                self._local.unfollow()
            self._agent_snap = snap
            self._agent_snap_answer = not pushed
            if pushed:
                self._kept = snap
                self._kept_throttle_until = None
            self._refused, self._refused_msg = False, ""
            self._publish_locked()

    def _keep_throttle_locked(self):
        """The agent stops deciding: its last throttle probability holds
        for one breaker window, the span it was computed over."""
        if self._kept_throttle_until is None:
            self._kept_throttle_until = self._c._clock() + self._local.policy.breaker.window

    def _disconnected(self):
        with self._smu:
            self._local.unfollow()  # it goes on from the agent's last breaker state
            self._agent_snap = None
            self._refused = False
            self._keep_throttle_locked()
            self._publish_locked()

    def _agent_refused(self, message):
        with self._smu:
            self._refused, self._refused_msg = True, message
            self._local.unfollow()
            self._agent_snap = None
            self._keep_throttle_locked()
            self._publish_locked()

    def _totals(self):
        with self._mu:
            return (self._first, self._success, self._failure, self._slow, self._rejected,
                    self._retries_agent, self._retries_local, self._probes_agent, self._probes_local,
                    self._rejected_agent, self._rejected_local)


def agent_target(addr):
    """The gRPC target of an agent address: "unix:///path", "/path" or a
    loopback host:port. Raises ValueError naming what is wrong."""
    if not addr:
        raise ValueError("must not be empty")
    if addr.startswith("unix://"):
        p = addr[len("unix://"):]
        if not p.startswith("/"):
            raise ValueError("%r: want unix:///absolute/path" % addr)
        return "unix://" + p
    if addr.startswith("/"):
        return "unix://" + addr
    host, sep, port = addr.rpartition(":")
    if not sep or not host:
        raise ValueError("%r: want unix:///path, /path or a loopback host:port" % addr)
    if not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError("%r: invalid port" % addr)
    h = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if h != "localhost":
        import ipaddress
        try:
            ip = ipaddress.ip_address(h)
        except ValueError:
            raise ValueError("%r: the agent must be on loopback (127.0.0.1, ::1 or localhost)" % addr) from None
        if not ip.is_loopback:
            raise ValueError("%r: the agent must be on loopback (127.0.0.1, ::1 or localhost)" % addr)
    return addr


class Client:
    """One service's link to Fusebox: the session with the local agent, the
    local fallback breakers and the handles of the dependencies it calls.
    Make one per process and close it at shutdown (or use it as a context
    manager). Every method is safe to call from any thread.

    Every argument is optional:

    - agent_address: default $FUSEBOX_AGENT, else
      unix:///run/fusebox/agent.sock; "unix:///path", "/path" or a loopback
      host:port. no_agent=True: local decisions only.
    - service: default $FUSEBOX_SERVICE, else the program's name; sent as
      Fusebox-Retry-Owner. instance: default "<hostname>-<pid>".
    - dependencies: names announced at connection (default none).
    - flush_interval: seconds between count deltas, at most 0.05 (default).
      agent_wait: the bound on every question to the agent (0.05).
      reconnect_min/reconnect_max: the reconnect backoff (0.1 / 5 s).
      max_dependencies: default 1000.
    - on_state_change(StateChange), on_agent_change(AgentEvent): default
      none; called in order from one thread of the client.
    - clock (monotonic seconds), wall (Unix seconds), random ([0, 1)),
      sleep: for tests; default time.monotonic, time.time, random.random,
      time.sleep.
    """

    def __init__(self, agent_address=None, service=None, instance=None, dependencies=(), *,
                 no_agent=False, flush_interval=0.05, agent_wait=0.05, reconnect_min=0.1,
                 reconnect_max=5.0, max_dependencies=1000, on_state_change=None, on_agent_change=None,
                 clock=time.monotonic, wall=time.time, random=random.random, sleep=time.sleep):
        agent_address = agent_address or os.environ.get(ENV_AGENT) or DEFAULT_AGENT_ADDRESS
        service = service or os.environ.get(ENV_SERVICE) or os.path.basename(sys.argv[0] or "") or "unknown"
        if service.endswith(".py"):
            service = service[:-3]
        instance = instance or "%s-%d" % (socket.gethostname() or "localhost", os.getpid())
        problems = []
        target = None
        if not no_agent:
            try:
                target = agent_target(agent_address)
            except ValueError as e:
                problems.append("agent_address: %s" % e)
        if not service.strip():
            problems.append("service: must not be empty")
        elif not _header_safe(service):
            problems.append("service: %r must be printable ASCII without spaces (it travels in a header)" % service)
        if not instance.strip():
            problems.append("instance: must not be empty")
        for d in dependencies:
            if not P.valid_dependency_name(d):
                problems.append("dependencies: %r is not 1-128 characters of [A-Za-z0-9._:/-]" % (d,))
        if not 0 < flush_interval <= _MAX_FLUSH_INTERVAL:
            problems.append("flush_interval: must be in (0, %g], got %r" % (_MAX_FLUSH_INTERVAL, flush_interval))
        if not agent_wait > 0:
            problems.append("agent_wait: must be positive, got %r" % (agent_wait,))
        if not reconnect_min > 0:
            problems.append("reconnect_min: must be positive, got %r" % (reconnect_min,))
        if not reconnect_max >= reconnect_min:
            problems.append("reconnect_max: must be at least reconnect_min (%r), got %r" % (reconnect_min, reconnect_max))
        if not max_dependencies > 0:
            problems.append("max_dependencies: must be positive, got %r" % (max_dependencies,))
        if problems:
            raise ValueError("fusebox config: " + "; ".join(problems))

        self.service, self.instance, self.agent_address = service, instance, agent_address
        self.flush_interval, self.agent_wait = flush_interval, agent_wait
        self.reconnect_min, self.reconnect_max = reconnect_min, reconnect_max
        self.max_dependencies = max_dependencies
        self._clock, self._wall, self._random, self._sleep = clock, wall, random, sleep
        self._on_state_change, self._on_agent_change = on_state_change, on_agent_change
        self._default_policy = P.DEFAULT_POLICY
        self._deps = {}  # replaced, never mutated: readers take no lock
        self._deps_mu = threading.Lock()
        self._closed = False
        self._close_mu = threading.Lock()
        self._events = None
        self._dispatcher = None
        if on_state_change is not None or on_agent_change is not None:
            self._events = queue.Queue(maxsize=1024)
            self.events_dropped = 0
            self._dispatcher = threading.Thread(target=self._dispatch, name="fusebox-callbacks", daemon=True)
            self._dispatcher.start()
        self._session = None
        self._pb = None
        if target is not None:
            from . import _session
            from .v1 import fusebox_pb2
            self._pb = fusebox_pb2
            self._session = _session.Session(self, target)
        for d in dependencies:
            self.dependency(d)
        self._flush_stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="fusebox-flush", daemon=True)
        self._flusher.start()
        if self._session is not None:
            self._session.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<fusebox.Client service=%s agent=%s connected=%s>" % (self.service, self.agent_address, self.agent_connected)

    @property
    def agent_connected(self):
        """Whether a session with the agent is up (its snapshots decide) or
        not (the local breakers decide)."""
        return self._session is not None and self._session.connected

    def dependency(self, name):
        """The handle on dependency name (the same one for every call).
        Raises InvalidDependencyError for a name that is not 1-128
        characters of [A-Za-z0-9._:/-] and TooManyDependenciesError for a
        new name past max_dependencies."""
        d = self._deps.get(name)
        if d is not None:
            return d
        if not P.valid_dependency_name(name):
            raise E.InvalidDependencyError("fusebox: invalid dependency name %r: want 1-128 characters of [A-Za-z0-9._:/-]" % (name,))
        with self._deps_mu:
            d = self._deps.get(name)
            if d is not None:
                return d
            if len(self._deps) >= self.max_dependencies:
                raise E.TooManyDependenciesError("fusebox: dependency %r refused: the client already tracks max_dependencies=%d names" % (name, self.max_dependencies))
            d = Dependency(self, name)
            nxt = dict(self._deps)
            nxt[name] = d
            self._deps = nxt
        if self._session is not None:
            self._session.subscribe(name)
        return d

    def call(self, dependency, fn, idempotency=NON_RETRYABLE, **options):
        """Call fn(attempt) through the breaker of dependency (a name or a
        Dependency), with retries as idempotency and the policy allow, and
        return what the successful attempt returned.

        - The first attempt is decided in process from the snapshot the
          agent pushed (strict=True asks the agent, Check, first); a retry
          takes one from the fleet retry budget (AcquireRetry), a half-open
          probe a permit (AcquireProbe), each waiting at most agent_wait.
        - Each attempt has the policy's perAttemptTimeout (attempt_timeout=
          overrides it; 0 or None: none) under the call's deadline
          (timeout= seconds from now, deadline= on the client's clock, or
          the enclosing fusebox.deadline()); attempt.timeout is what is left
          of it: fn must honour it. A retry starts only when its full
          timeout and the backoff fit before the deadline.
        - Between attempts: the policy's backoff (full jitter by default),
          at least a server's Retry-After.
        - NON_RETRYABLE calls (the default, and every call inside a request
          whose caller owns retries, unless nested_retries=True) make one
          attempt; IDEMPOTENT ones are retried; IDEMPOTENT_WITH_KEY ones
          carry idempotency_key (default: a random 128-bit key) on every
          attempt.
        - Other options: max_attempts (default the policy's), classifier
          (default default_classifier), wait_for_slot (seconds to wait for
          a concurrency slot, default 0), fallback (called with the final
          exception; its value is returned instead).

        Raises: a RejectedError subclass when Fusebox refused (OpenError,
        ForcedOpenError, ThrottledError, ConcurrencyLimitError; for a
        refused retry BudgetExhaustedError or OpenError with last_error
        set), DeadlineExceeded when the deadline passed or left no room for
        another attempt, else the last attempt's exception."""
        d = dependency if isinstance(dependency, Dependency) else self.dependency(dependency)
        return d._run(fn, idempotency, **options)

    # --- agent questions ---

    def _ask(self, dep, call):
        """One unary call about dep under agent_wait; None when the agent
        did not answer (the local breaker decides)."""
        return self._session.ask(dep, call)

    def _session_probe_result(self, name, gen, success, slow):
        if self._session is not None:
            self._session.add_probe_result(name, gen, success, slow)

    # --- flushing ---

    def _flush_loop(self):
        while not self._flush_stop.wait(self.flush_interval):
            try:
                self._flush()
            except Exception:  # never let the flusher die
                log.exception("flush failed")
        self._flush()

    def _flush(self):
        """Each dependency's deltas since the previous flush: the local
        breaker gets what it has not counted itself; the agent (while a
        session is up) what it has not counted itself (AcquireRetry and
        AcquireProbe count the retries, probes and refusals they decide)."""
        s = self._session
        connected = s is not None and s.connected
        for d in self._deps.values():
            t = d._totals()
            la, ll = d._sent_agent, d._sent_local
            d._sent_agent = d._sent_local = t
            # t: first, success, failure, slow, rejected, retries_agent,
            # retries_local, probes_agent, probes_local, rejected_agent, rejected_local
            local = ((t[0] - ll[0]) + (t[7] - ll[7]), t[5] - ll[5], t[1] - ll[1], t[2] - ll[2], t[3] - ll[3],
                     (t[4] - ll[4]) + (t[9] - ll[9]))
            if any(local):
                d._local.add(local)
            if connected:
                agent = (t[0] - la[0], 0, t[1] - la[1], t[2] - la[2], t[3] - la[3], t[4] - la[4])
                if any(agent):
                    s.add_deltas(d.name, agent)
                n = d._in_flight
                if d._dec.limit > 0 or n != d._sent_in_flight:
                    if n != d._sent_in_flight or not d._in_flight_sent:
                        s.set_in_flight(d.name, n)
                        d._sent_in_flight, d._in_flight_sent = n, True
            changed = d._local.tick()
            if changed or not d._dec.from_agent:
                d._publish()
        if s is not None:
            s.kick()

    # --- callbacks ---

    def _emit(self, ev):
        try:
            self._events.put_nowait(ev)
        except queue.Full:
            self.events_dropped += 1

    def _dispatch(self):
        while True:
            ev = self._events.get()
            if ev is None:
                return
            try:
                if isinstance(ev, StateChange):
                    if self._on_state_change is not None:
                        self._on_state_change(ev)
                elif self._on_agent_change is not None:
                    self._on_agent_change(ev)
            except Exception:
                log.exception("callback failed")

    def close(self):
        """Stop the client, in this order: the flusher after a last flush;
        the session sends what is queued and half-closes, waiting at most
        agent_wait for the agent to end it; the connection closes; queued
        callbacks run. Idempotent. Handles keep working after close,
        deciding from the last state seen, but report nothing."""
        with self._close_mu:
            if self._closed:
                return
            self._closed = True
        self._flush_stop.set()
        self._flusher.join()
        if self._session is not None:
            self._session.close(self.agent_wait)
        if self._dispatcher is not None:
            self._events.put(None)
            self._dispatcher.join()
