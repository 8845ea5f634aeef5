"""Policy settings, decision snapshots and their conversion from the wire
(a snapshot carries its policy as one JSON policy document, policy_json).

Durations are float seconds. The defaults are the fleet default policy's
(sharedstate.DefaultPolicy in the Go tree).
"""

import dataclasses
import json
import re

from . import _backoff
from .v1 import fusebox_pb2 as pb

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half-open"

OVERRIDE_NONE = "none"
FORCED_OPEN = "forced-open"
FORCED_CLOSED = "forced-closed"

ENFORCE = "enforce"
SHADOW = "shadow"

SCOPE_FLEET = "fleet"
SCOPE_ZONE = "zone"
SCOPE_NODE = "node"

ALLOW = "allow"
ALLOW_PROBE = "allow-probe"
REJECT = "reject"

# Reasons of a refusal, as the Go client's RejectedError.Reason spells them.
REASON_OPEN = "open"
REASON_FORCED_OPEN = "forced-open"
REASON_NO_PERMIT = "half-open-no-permit"
REASON_BUDGET = "budget-exhausted"
REASON_THROTTLED = "throttled"
REASON_RAMP = "ramp"
REASON_CONCURRENCY = "concurrency-limit"

_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,128}\Z")


def valid_dependency_name(name):
    """Whether name is 1-128 characters of [A-Za-z0-9._:/-]."""
    return isinstance(name, str) and _NAME.match(name) is not None


@dataclasses.dataclass(frozen=True)
class BreakerSettings:
    failure_rate_threshold: float = 0.5
    slow_call_rate_threshold: float = 1.0
    slow_call_duration: float = 2.0
    minimum_requests: int = 20
    min_failing_nodes: int = 2
    window: float = 10.0
    open_duration: float = 5.0
    max_open_duration: float = 120.0
    half_open_probes: int = 3
    probe_success_threshold: int = 3
    probe_timeout: float = 5.0
    fleet_max_open_duration: float = 5.0
    scope: str = SCOPE_FLEET
    mode: str = ENFORCE
    confidence: float = 0.95
    fast_path: bool = True

    def open_duration_for(self, open_count):
        """openDuration * 2**(openCount-1), capped at maxOpenDuration."""
        d = self.open_duration
        for _ in range(1, max(open_count, 1)):
            if d >= self.max_open_duration:
                break
            d *= 2
        if self.max_open_duration > 0 and d > self.max_open_duration:
            d = self.max_open_duration
        return d

    def fleet_open_duration_for(self, open_count):
        """How long the fleet's (or a zone's) breaker stays open:
        open_duration_for, its doubling capped at fleetMaxOpenDuration (or
        openDuration, when longer)."""
        return min(self.open_duration_for(open_count), max(self.fleet_max_open_duration, self.open_duration))

    def problems(self):
        """What makes these settings unusable (empty when they are fine)."""
        out = []
        if not 0 < self.failure_rate_threshold <= 1:
            out.append("failure_rate_threshold must be in (0, 1]")
        if not 0 < self.slow_call_rate_threshold <= 1:
            out.append("slow_call_rate_threshold must be in (0, 1]")
        if self.minimum_requests < 1:
            out.append("minimum_requests must be at least 1")
        for f in ("window", "open_duration", "probe_timeout", "slow_call_duration", "fleet_max_open_duration"):
            if not getattr(self, f) > 0:
                out.append(f + " must be positive")
        if self.max_open_duration < self.open_duration:
            out.append("max_open_duration must be at least open_duration")
        if self.probe_success_threshold < 1:
            out.append("probe_success_threshold must be at least 1")
        if not 0 <= self.confidence < 1:
            out.append("confidence must be in [0, 1)")
        if self.mode not in (ENFORCE, SHADOW):
            out.append("mode must be enforce or shadow")
        return out


@dataclasses.dataclass(frozen=True)
class RetrySettings:
    max_attempts: int = 3
    per_attempt_timeout: float = 0.5
    backoff_base: float = 0.1
    backoff_max: float = 5.0
    jitter: str = _backoff.FULL
    budget_ratio: float = 0.1
    budget_min_retries_per_second: float = 10.0
    hedge_delay: float = 0.0
    max_hedges: int = 0

    def problems(self):
        out = []
        if self.max_attempts < 1:
            out.append("max_attempts must be at least 1")
        if self.per_attempt_timeout < 0 or self.backoff_base < 0 or self.backoff_max < 0:
            out.append("durations must not be negative")
        if self.jitter not in _backoff.JITTERS:
            out.append("unknown jitter " + repr(self.jitter))
        if self.budget_ratio < 0 or self.budget_min_retries_per_second < 0:
            out.append("the budget must not be negative")
        return out


@dataclasses.dataclass(frozen=True)
class Policy:
    """The parts of a dependency's effective policy a client acts on."""
    breaker: BreakerSettings = BreakerSettings()
    retry: RetrySettings = RetrySettings()

    def problems(self):
        return self.breaker.problems() + self.retry.problems()


DEFAULT_POLICY = Policy()


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One dependency as the deciding side (agent or local breaker) sees it:
    what decides a first attempt in process. Never modified."""
    dependency: str
    state: str = CLOSED
    local_state: str = CLOSED
    generation: int = 0
    version: int = 0
    open_count: int = 0
    probe_round: int = 0
    probe_permit: bool = False
    since: float = 0.0  # Unix seconds, 0: unknown
    override: str = OVERRIDE_NONE
    override_reason: str = ""
    override_expires: float = 0.0  # Unix seconds, 0: until cleared
    mode: str = ENFORCE
    scope: str = SCOPE_FLEET
    slow_call_duration: float = 2.0
    retry: RetrySettings = RetrySettings()
    throttle_probability: float = 0.0
    ramp_probability: float = 0.0  # the ramp after a close: part of throttle_probability
    concurrency_limit: int = 0

    def decide_first(self):
        """(verdict, reason) for a first attempt, as sharedstate's
        Snapshot.DecideFirst: an override wins, then the governing breaker,
        then this node's own; shadow mode turns a refusal into an allow."""
        if self.override == FORCED_OPEN:
            return REJECT, REASON_FORCED_OPEN
        if self.override == FORCED_CLOSED:
            return ALLOW, ""
        if self.state == OPEN:
            d = (REJECT, REASON_OPEN)
        elif self.state == HALF_OPEN:
            d = (ALLOW_PROBE, "") if self.probe_permit else (REJECT, REASON_NO_PERMIT)
        elif self.local_state == OPEN:
            d = (REJECT, REASON_OPEN)
        elif self.local_state == HALF_OPEN:
            d = (ALLOW_PROBE, "") if self.probe_permit else (REJECT, REASON_NO_PERMIT)
        else:
            return ALLOW, ""
        if self.mode == SHADOW and d[0] == REJECT:
            return ALLOW, d[1]
        return d


# --- conversions from the wire -------------------------------------------

_STATES = {pb.BREAKER_STATE_CLOSED: CLOSED, pb.BREAKER_STATE_OPEN: OPEN, pb.BREAKER_STATE_HALF_OPEN: HALF_OPEN}
_OVERRIDES = {pb.OVERRIDE_STATE_FORCED_OPEN: FORCED_OPEN, pb.OVERRIDE_STATE_FORCED_CLOSED: FORCED_CLOSED}
REASONS = {pb.REJECT_REASON_OPEN: REASON_OPEN, pb.REJECT_REASON_FORCED_OPEN: REASON_FORCED_OPEN,
           pb.REJECT_REASON_HALF_OPEN_NO_PERMIT: REASON_NO_PERMIT,
           pb.REJECT_REASON_BUDGET_EXHAUSTED: REASON_BUDGET, pb.REJECT_REASON_THROTTLED: REASON_THROTTLED,
           pb.REJECT_REASON_RAMP: REASON_RAMP}

_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text):
    """Seconds in a Go duration string, as a policy document writes
    durations ("500ms", "1m30s", "0s"). ValueError for anything else."""
    body = text[1:] if text[:1] in "+-" else text
    parts = _DURATION_PART.findall(body)
    if body != "0" and (not parts or "".join(n + u for n, u in parts) != body):
        raise ValueError("not a Go duration: %r" % text)
    d = sum(float(n) * _UNIT[u] for n, u in parts)
    return -d if text.startswith("-") else d


# Where a leaf of a policy document goes when the flattened snake_case
# name of its path in its section ("backoff.base": backoff_base) is not
# the name of a field here.
_RENAMED = {"backoff_jitter": "jitter", "hedge_max_hedges": "max_hedges"}


def _leaves(obj, prefix=""):
    for key, v in obj.items():
        name = prefix + re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
        if isinstance(v, dict):
            yield from _leaves(v, name + "_")
        else:
            yield _RENAMED.get(name, name), v


def _settings(base, section):
    """base (BreakerSettings or RetrySettings) with every field the policy
    document's section sets; the others (ramp, for one) are the agent's."""
    kw = {}
    for name, v in _leaves(section):
        if not hasattr(base, name):
            continue
        want = type(getattr(base, name))
        kw[name] = go_duration(v) if want is float and isinstance(v, str) else want(v)
    return dataclasses.replace(base, **kw)


def _timestamp(m, field):
    if not m.HasField(field):
        return 0.0
    t = getattr(m, field)
    return t.seconds + t.nanos / 1e9


def policy_from_json(raw):
    """The policy of a snapshot's policy_json: the effective policy as one
    complete JSON policy document. ValueError when it is not one, or the
    settings it gives are unusable."""
    try:
        doc = json.loads(raw)
        pol = Policy(breaker=_settings(BreakerSettings(), doc["breaker"]), retry=_settings(RetrySettings(), doc["retry"]))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError("not a policy document: %s" % e) from e
    if pol.problems():
        raise ValueError("; ".join(pol.problems()))
    return pol


def snapshot_from_proto(m, pol):
    """A Snapshot from the wire, under pol (the policy in its policy_json, or
    the one held when it carries none)."""
    state = _STATES.get(m.state, CLOSED)
    local = _STATES.get(m.local_state, CLOSED)
    if m.local_state == pb.BREAKER_STATE_UNSPECIFIED and m.node_local_open:
        local = HALF_OPEN if state == CLOSED and m.probe_permit else OPEN
    p = m.throttle_probability if 0 < m.throttle_probability <= 1 else 0.0  # NaN and out-of-range values are dropped
    ramp = m.ramp_probability if 0 < m.ramp_probability <= p else 0.0  # likewise, and the ramp is part of it
    return Snapshot(
        dependency=m.dependency, state=state, local_state=local, generation=m.generation,
        version=m.version, open_count=m.open_count, probe_round=m.probe_round,
        probe_permit=m.probe_permit, since=_timestamp(m, "since"),
        override=_OVERRIDES.get(m.override, OVERRIDE_NONE), override_reason=m.override_reason,
        override_expires=_timestamp(m, "override_expires"),
        mode=pol.breaker.mode, scope=pol.breaker.scope, slow_call_duration=pol.breaker.slow_call_duration,
        retry=pol.retry,
        throttle_probability=p, ramp_probability=ramp,
        concurrency_limit=m.concurrency_limit,
    )
