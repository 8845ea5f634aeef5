package agent

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// A name confirms when an operator routed it, or a client on the unix
// socket or in process reported it; a client on --grpc-addr (every local
// user reaches it) does not confirm, and the rows of what it names stay
// on this agent.
func TestOnlyTrustedCallersConfirm(t *testing.T) {
	cfg := testConfig(t, "confirming")
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.Proxy.Routes = []string{"shipping.internal=shipping-api"}
	var in agentopt.Inside
	a := startAgent(t, cfg, agentopt.WithSim(agentopt.Sim{Attach: func(i agentopt.Inside) { in = i }}))
	conn, err := grpc.NewClient("passthrough:///"+a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, r := range []struct {
		c   fuseboxv1.AgentClient
		dep string
	}{{dial(t, a.Agent), "by-socket"}, {fuseboxv1.NewAgentClient(conn), "by-tcp"}} {
		if _, err := r.c.Report(ctxT(t, 10*time.Second), successes(r.dep, 3)); err != nil {
			t.Fatalf("Report(%s): %v", r.dep, err)
		}
	}
	if _, err := in.API.Report(context.Background(), successes("in-process", 3)); err != nil {
		t.Fatal(err)
	}
	for dep, want := range map[string]bool{"by-socket": true, "in-process": true, "shipping-api": true, "by-tcp": false} {
		if got := a.confirmed.has(dep); got != want {
			t.Errorf("%s confirmed: %v, want %v", dep, got, want)
		}
	}
	before := value(t, a.m.withheld[withheldRow])
	a.tick()
	if value(t, a.m.withheld[withheldRow]) <= before {
		t.Error("the row of by-tcp was not withheld")
	}
	for _, r := range (*gossipHandler)(a.Agent).LocalState(false).GetRows() {
		if r.GetDependency() == "by-tcp" {
			t.Error("the push-pull state carries the row of by-tcp")
		}
	}
}
