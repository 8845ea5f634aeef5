package control

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
	"github.com/fusebox-dev/fusebox/coordinator"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

// setup is what a test's coordinator and agents run with.
type setup struct {
	tokens bool                 // the coordinator checks testTokens
	etcd   []string             // an etcd the test runs (none: an embedded one)
	coord  []coordinator.Option // more options of the coordinator
	agent  func(*agent.Config)  // a change to every agent's config, last
}

// startCoordinator starts an embedded etcd (unless s names one) and a
// coordinator on it, and no agent yet (startAgents brings them, after the
// test wrote what they are to find at their start).
func startCoordinator(t *testing.T, s setup) *fleettest.Fleet {
	t.Helper()
	var tokens string
	if s.tokens {
		tokens = writeTokens(t, testTokens)
	}
	return fleettest.Start(t, fleet.Config{N: 0, Etcd: s.etcd == nil, EtcdEndpoints: s.etcd, Coordinator: true, CoordinatorOptions: s.coord,
		CoordinatorTune: func(c *coordinator.Config) { c.TokensFile = tokens },
		Tune: func(i int, c *agent.Config) {
			fleet.Quick(c)
			c.Name = fmt.Sprintf("agent-%d", i)
			c.Zone = []string{"zone-a", "zone-b"}[i%2]
			c.HTTPAddr = "127.0.0.1:0"
			if s.agent != nil {
				s.agent(c)
			}
		}})
}

// startAgents starts n real agents on the fleet's etcd (agent-0 in
// zone-a, agent-1 in zone-b, …); they find each other, and the
// coordinator's observer finds them, through the members/ registry.
func startAgents(t *testing.T, f *fleettest.Fleet, n int) []*agent.Agent {
	t.Helper()
	ctx := fleettest.Ctx(t, fleettest.StartTimeout)
	var out []*agent.Agent
	for range n {
		i, err := f.Add(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f.Agent(i))
	}
	if err := f.WaitMembership(ctx); err != nil {
		t.Fatal(err)
	}
	return out
}

// observed is how many agents the coordinator's observer lists alive
// (admin: a client of its Admin API); -1 when it does not answer.
func observed(ctx context.Context, admin fuseboxv1.AdminClient) int {
	members, err := admin.ListMembers(ctx, &fuseboxv1.ListMembersRequest{})
	if err != nil {
		return -1
	}
	alive := 0
	for _, m := range members.GetMembers() {
		if m.GetRole() == "agent" && m.GetStatus() == "alive" {
			alive++
		}
	}
	return alive
}

func ctxFor(t testing.TB, d time.Duration) context.Context { return fleettest.Ctx(t, d) }

// tokenCreds sends a bearer token over plaintext (tests only).
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return false }

// adminClient dials the coordinator's Admin API, with token when not empty.
func adminClient(t testing.TB, addr, token string) fuseboxv1.AdminClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds(token)))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return fuseboxv1.NewAdminClient(conn)
}

// writeTokens writes a tokens file and returns its path.
func writeTokens(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	adminToken  = "admin-token-0123456789abcdef"
	viewerToken = "viewer-token-0123456789abcdef"
	testTokens  = "# test tokens\nadmin " + adminToken + " ops-admin\nviewer " + viewerToken + "\n"
)

// httpDo makes one request of the coordinator's HTTP API (with token when
// not empty) and returns its status and body.
func httpDo(t *testing.T, method, url, token, body string, hdr map[string]string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxFor(t, 30*time.Second), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// confirm has a client on each agent's socket report one successful call
// to dep: an agent gossips only the names a local client (or its proxy's
// traffic) confirmed, and the tests that call the engines directly
// (incident, callThrough) confirm theirs first.
func confirm(t *testing.T, agents []*agent.Agent, dep string) {
	t.Helper()
	for _, a := range agents {
		report(t, a, outcome(dep, first, success, 1))
	}
}
