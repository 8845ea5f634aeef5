"""Backoff between attempts: the formulas of the Go client's
clientlib/internal/backoff, in seconds (floats) instead of durations."""

FULL = "full"
EQUAL = "equal"
DECORRELATED = "decorrelated"
NONE = "none"

JITTERS = (FULL, EQUAL, DECORRELATED, NONE)

# The Go client's bound: 2**62 ns (about 146 years).
_MAX = 2 ** 62 / 1e9


def ceiling(base, cap, n):
    """min(cap, base * 2**n) for n >= 0; a cap of 0 or less means none."""
    if base <= 0:
        return 0.0
    n = max(n, 0)
    d = float(base)
    for _ in range(n):
        if (cap > 0 and d >= cap) or d > _MAX / 2:  # the next doubling would pass the bound
            break
        d *= 2
    if cap > 0 and d > cap:
        d = float(cap)
    return d


def wait(base, cap, jitter, n, prev, u):
    """The wait before retry n (0 before the first retry), in seconds.

    prev is the previous wait (Decorrelated uses it; 0 before the first
    retry), u a uniform number in [0, 1).
    """
    if not 0 <= u < 1:
        u = 0.0
    if jitter == EQUAL:
        c = ceiling(base, cap, n)
        half = c / 2
        return half + _scale(c - half, u)
    if jitter == DECORRELATED:
        if base <= 0:
            return 0.0
        lo = float(base)
        hi = 3 * prev if 0 < prev < _MAX / 3 else lo
        hi = max(hi, lo)
        d = lo + _scale(hi - lo, u)
        if cap > 0 and d > cap:
            d = float(cap)
        return d
    if jitter == NONE:
        return ceiling(base, cap, n)
    return _scale(ceiling(base, cap, n), u)  # full jitter, the default


def _scale(d, u):
    """d*u for u in [0, 1): a value in [0, d) when d > 0."""
    if d <= 0:
        return 0.0
    v = d * u
    if v >= d:  # float rounding at the top of the range
        v = d * (1 - 2 ** -53)
    return max(v, 0.0)
