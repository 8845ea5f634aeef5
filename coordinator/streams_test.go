package coordinator

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// openStream opens GET /api/v1/events with token and returns the status,
// the body of a refusal, and a close func for an open stream (which waits
// for the stream's first line: the subscription exists).
func openStream(t *testing.T, client *http.Client, base, token string) (int, string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(b), func() {}
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("first line of the stream = %q, %v", line, err)
	}
	closed := false
	closeFn := func() {
		if !closed {
			closed = true
			cancel()
			resp.Body.Close()
		}
	}
	t.Cleanup(closeFn)
	return resp.StatusCode, "", closeFn
}

// More event streams than the caps allow: past one identity's cap its next
// stream is refused with 429 naming --max-event-streams-per-identity (SSE)
// or RESOURCE_EXHAUSTED (Watch), past the total anyone's with 503 naming
// --max-event-streams; each refusal is counted, the open streams keep
// working, the rest of the API answers, and a closed stream frees its slot.
func TestEventStreamCaps(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens+"viewer other-viewer-token-0123456789 night-shift\n")
	cfg.MaxEventStreams, cfg.MaxEventStreamsPerIdentity = 6, 3
	c := startCoordinator(t, cfg)
	base := "http://" + c.HTTPAddr()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	var closers []func()
	for i := range 3 {
		code, body, closeFn := openStream(t, client, base, viewerToken)
		if code != http.StatusOK {
			t.Fatalf("viewer stream %d: %d %s", i+1, code, body)
		}
		closers = append(closers, closeFn)
	}
	code, body, _ := openStream(t, client, base, viewerToken)
	expect(t, "the viewer's 4th stream", code, body, http.StatusTooManyRequests, `identity \"viewer:`, "--max-event-streams-per-identity")

	// Watch counts against the same caps.
	// watch opens a Watch: unless refused it waits for the headers (sent once
	// subscribed), else for the refusal (a Recv that fails at once).
	watch := func(token string, refused bool) error {
		ws, err := adminClient(t, c.GRPCAddr(), token).Watch(ctxFor(t, time.Minute), &fuseboxv1.WatchRequest{})
		if err != nil {
			return err
		}
		if refused {
			_, err = ws.Recv()
			return err
		}
		_, err = ws.Header()
		return err
	}
	if err := watch(viewerToken, true); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-event-streams-per-identity") {
		t.Fatalf("the viewer's Watch past its cap: %v, want ResourceExhausted naming the flag", err)
	}
	for i := range 2 {
		if err := watch(adminToken, false); err != nil {
			t.Fatalf("admin Watch %d: %v", i+1, err)
		}
	}
	code, body, _ = openStream(t, client, base, adminToken)
	if code != http.StatusOK {
		t.Fatalf("the 6th stream: %d %s", code, body)
	}
	code, body, _ = openStream(t, client, base, "other-viewer-token-0123456789")
	expect(t, "a 7th stream", code, body, http.StatusServiceUnavailable, "6 are open", "--max-event-streams allows")
	if err := watch("other-viewer-token-0123456789", true); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a Watch past the total: %v, want ResourceExhausted", err)
	}
	if got := metricValue(t, c.reg, "fusebox_coordinator_event_streams_refused_total", map[string]string{"limit": "identity"}); got != 2 {
		t.Errorf("refused past the identity cap: %v, want 2", got)
	}
	if got := metricValue(t, c.reg, "fusebox_coordinator_event_streams_refused_total", map[string]string{"limit": "total"}); got != 2 {
		t.Errorf("refused past the total: %v, want 2", got)
	}
	// The caps refuse streams only: the other endpoints answer.
	code, body = httpDo(t, "GET", base+"/api/v1/fleet", "other-viewer-token-0123456789", "", nil)
	expect(t, "the fleet while the streams are full", code, body, http.StatusOK)
	// An open stream still gets events.
	if _, err := adminClient(t, c.GRPCAddr(), adminToken).ForceOpen(ctxFor(t, 10*time.Second),
		&fuseboxv1.SetOverrideRequest{Dependency: "ledger", Reason: "drill"}); err != nil {
		t.Fatal(err)
	}

	closers[0]()
	sstest.Eventually(t, 10*time.Second, "the closed stream's slot to be free", func() bool { return c.broker.Subscribers() == 5 })
	if code, body, _ = openStream(t, client, base, "other-viewer-token-0123456789"); code != http.StatusOK {
		t.Fatalf("a stream after one closed: %d %s", code, body)
	}
}
