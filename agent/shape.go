package agent

// The agent's part of the concurrency limit: it sums the in-flight counts
// its sessions report into the node's (Engine.SetInFlight, which travels
// with the node's rows), and shares the node's share of the limit evenly
// among the sessions that follow the dependency.

// shapeHub is the hub's per-dependency bookkeeping of followers and
// in-flight calls. Guarded by hub.mu (write lock).
type shapeHub struct {
	followers map[string]int    // sessions following the dependency
	inFlight  map[string]uint64 // the sum of the sessions' last reports
}

// follow counts s as a follower of dep. The other followers' process shares
// change: the caller tells them (hub.changed) after releasing s.mu.
func (h *hub) follow(dep string) {
	h.mu.Lock()
	if h.shape.followers == nil {
		h.shape.followers = map[string]int{}
	}
	h.shape.followers[dep]++
	h.mu.Unlock()
}

// followers returns how many sessions follow dep.
func (h *hub) followers(dep string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.shape.followers[dep]
}

// setInFlight replaces s's in-flight count for dep (old is what s reported
// before) and returns the node's new total.
func (h *hub) setInFlight(dep string, old, n uint64) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shape.inFlight == nil {
		h.shape.inFlight = map[string]uint64{}
	}
	t := h.shape.inFlight[dep]
	t -= min(t, old)
	if t += n; t < n { // saturate
		t = ^uint64(0)
	}
	if t == 0 {
		delete(h.shape.inFlight, dep)
	} else {
		h.shape.inFlight[dep] = t
	}
	return t
}

// leave forgets what s contributed: its follows and its in-flight counts.
// It returns the dependencies whose node totals changed, with the totals.
func (h *hub) leave(follows []string, inFlight map[string]uint64) map[string]uint64 {
	h.mu.Lock()
	for _, dep := range follows {
		if h.shape.followers[dep]--; h.shape.followers[dep] <= 0 {
			delete(h.shape.followers, dep)
		}
	}
	h.mu.Unlock()
	out := make(map[string]uint64, len(inFlight))
	for dep, n := range inFlight {
		out[dep] = h.setInFlight(dep, n, 0)
	}
	return out
}

// processShare is one session's part of the node's share of dep's
// concurrency limit: the share split evenly among the sessions that follow
// dep, at least 1 (0: no limit).
func (a *Agent) processShare(dep string, nodeShare int) uint32 {
	if nodeShare <= 0 {
		return 0
	}
	return uint32(max(1, nodeShare/max(1, a.hub.followers(dep))))
}

// reportInFlight records a session's in-flight report for dep.
func (s *session) reportInFlight(dep string, n uint64) {
	s.mu.Lock()
	if s.inFlight == nil {
		s.inFlight = map[string]uint64{}
	}
	old := s.inFlight[dep]
	if n == 0 {
		delete(s.inFlight, dep)
	} else {
		s.inFlight[dep] = n
	}
	s.mu.Unlock()
	if old == n {
		return
	}
	_ = s.a.eng.SetInFlight(dep, s.a.hub.setInFlight(dep, old, n)) // dep was just counted, so it is tracked
}

// close forgets the session's contributions to the node's totals.
func (s *session) close() {
	s.mu.Lock()
	follows := make([]string, 0, len(s.subs))
	for dep := range s.subs {
		follows = append(follows, dep)
	}
	inFlight := s.inFlight
	s.inFlight = nil
	s.releaseBytes()
	s.mu.Unlock()
	for dep, t := range s.a.hub.leave(follows, inFlight) {
		_ = s.a.eng.SetInFlight(dep, t)
	}
	for _, dep := range follows {
		s.a.hub.changed(dep) // the other followers' shares grew
	}
}
