package proxy

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// answerUpstream hands the upstream's answer on: status, headers (without
// hop-by-hop ones), the body as it comes (flushed as it comes when its
// length is unknown or it is an event stream), trailers; and says what the
// call did (info).
func (p *Proxy) answerUpstream(w http.ResponseWriter, f form, resp *http.Response, info *clientlib.CallInfo) {
	defer resp.Body.Close()
	h := w.Header()
	conn := connectionTokens(resp.Header)
	for k, vs := range resp.Header {
		if hopHeaders[k] || conn[k] || answerHeaders[k] {
			continue
		}
		h[k] = vs
	}
	h[HeaderAttempts] = attemptsValue(info.Attempts)
	if info.Rejected != nil { // a retry was refused: the last answer goes on
		h.Set(HeaderRejected, info.Rejected.Reason)
	}
	if len(resp.Trailer) > 0 {
		h["Trailer"] = []string{strings.Join(slices.Collect(maps.Keys(resp.Trailer)), ", ")}
	}
	p.m.requests[f][resultUpstream].Inc()
	w.WriteHeader(resp.StatusCode)
	flush := resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if err := copyBody(w, resp.Body, flush); err != nil {
		if errors.Is(err, errUpstreamBody) {
			// The client must see a truncated answer, not a complete one.
			panic(http.ErrAbortHandler)
		}
		return
	}
	for k, vs := range resp.Trailer {
		h[k] = vs
	}
}

var errUpstreamBody = errors.New("fusebox proxy: reading the upstream's body")

// copyBody copies body to w, flushing after each write when flush; an
// error reading the body wraps errUpstreamBody.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if flush {
				if ferr := rc.Flush(); ferr != nil {
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errors.Join(errUpstreamBody, err)
		}
	}
}

// answerFailed answers a call that brought no answer back, from info and
// the call's error: 403 when it would have reached one of the agent's own
// listeners, nothing when the client went away, else answerRejected or
// answerError.
func (p *Proxy) answerFailed(w http.ResponseWriter, r *http.Request, t *target, info *clientlib.CallInfo, err error) {
	switch {
	case errors.Is(err, errOwnListener):
		p.answerInvalid(w, t.form, &requestError{status: http.StatusForbidden, reason: "own-listener",
			msg: "fusebox proxy: " + t.authority + " resolves to one of the agent's own listeners"})
	case r.Context().Err() != nil: // the client went away: nothing to say about the upstream
		p.m.requests[t.form][resultCanceled].Inc()
	case info.Rejected != nil:
		p.answerRejected(w, t, info.Rejected.Reason, info.Attempts, lastAttemptErr(err))
	default:
		p.answerError(w, t, info.Attempts, err)
	}
}

// answerError answers 502 (no answer) or 504 (no answer in time).
func (p *Proxy) answerError(w http.ResponseWriter, t *target, attempts int, err error) {
	p.m.requests[t.form][resultError].Inc()
	h := w.Header()
	h[HeaderAttempts] = attemptsValue(attempts)
	status, kind := http.StatusBadGateway, "upstream"
	msg := "fusebox proxy: " + t.dep + " (" + t.authority + ") did not answer: " + errText(err)
	if errors.Is(err, context.DeadlineExceeded) {
		status, kind = http.StatusGatewayTimeout, "timeout"
		msg = "fusebox proxy: " + t.dep + " (" + t.authority + ") did not answer in time"
	}
	h.Set(HeaderError, kind)
	http.Error(w, msg, status)
}

func errText(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}

// answerRejected answers a refusal at once: 503 with Retry-After and the
// reason. attempts is how many were made before a retry was refused;
// lastErr what the last one came to.
func (p *Proxy) answerRejected(w http.ResponseWriter, t *target, reason string, attempts int, lastErr error) {
	if attempts == 0 {
		p.m.requests[t.form][resultRejected].Inc()
	} else {
		p.m.requests[t.form][resultError].Inc()
	}
	var why sharedstate.Reason
	switch reason {
	case sharedstate.ReasonOpen.String():
		why = sharedstate.ReasonOpen
	case sharedstate.ReasonForcedOpen.String():
		why = sharedstate.ReasonForcedOpen
	}
	snap := p.cfg.Engine.Snapshot(t.dep)
	var pol sharedstate.BreakerPolicy
	if why == sharedstate.ReasonOpen || why == sharedstate.ReasonForcedOpen {
		pol = p.cfg.Engine.Policy(t.dep).Breaker
	}
	h := w.Header()
	h.Set("Retry-After", retryAfter(snap, pol, why, time.Now()))
	h.Set(HeaderRejected, reason)
	h[HeaderAttempts] = attemptsValue(attempts)
	msg := "fusebox proxy: " + t.dep + ": refused by Fusebox (" + reason + ")"
	if attempts > 0 {
		msg += " after " + strconv.Itoa(attempts) + " attempt(s); the last: " + errText(lastErr)
	}
	http.Error(w, msg, http.StatusServiceUnavailable)
}
