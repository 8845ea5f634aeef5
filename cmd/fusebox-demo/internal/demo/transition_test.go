package demo

import (
	"testing"

	"github.com/fusebox-dev/fusebox/clientlib"
)

func TestClientTransition(t *testing.T) {
	local := func(s clientlib.BreakerState, gen uint64) clientlib.Status {
		return clientlib.Status{Dependency: "d", State: s, Generation: gen}
	}
	agent := func(s clientlib.BreakerState, gen uint64) clientlib.Status {
		st := local(s, gen)
		st.FromAgent = true
		return st
	}
	cases := []struct {
		name     string
		from, to clientlib.Status
		want     string // "" for no transition
	}{
		{"agent's first push of the same state", local(clientlib.Closed, 0), agent(clientlib.Closed, 0), ""},
		{"agent's push at a later generation", local(clientlib.Closed, 0), agent(clientlib.Closed, 4), ""},
		{"agent lost, fallback holds its state", agent(clientlib.Open, 3), local(clientlib.Open, 3), ""},
		{"nothing moved", agent(clientlib.Closed, 2), agent(clientlib.Closed, 2), ""},
		{"the agent's breaker opens", agent(clientlib.Closed, 0), agent(clientlib.Open, 1), "closed -> open"},
		{"re-opened at a new generation", agent(clientlib.Open, 1), agent(clientlib.Open, 2), "open -> open"},
		{"the agent differs from the fallback", local(clientlib.Closed, 0), agent(clientlib.Open, 1), "local-fallback:closed -> open"},
		{"the fallback trips alone", local(clientlib.Closed, 1), local(clientlib.Open, 2), "local-fallback:closed -> local-fallback:open"},
	}
	for _, c := range cases {
		from, to, ok := clientTransition(clientlib.StateChange{Dependency: "d", From: c.from, To: c.to})
		got := ""
		if ok {
			got = from + " -> " + to
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
