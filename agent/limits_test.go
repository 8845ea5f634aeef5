package agent

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestMaxSessions: with --max-sessions 2 a third Session is refused with
// ResourceExhausted naming the flag, counted, and accepted again once one
// of the two ends.
func TestMaxSessions(t *testing.T) {
	cfg := testConfig(t, "capped")
	cfg.MaxSessions = 2
	a := startAgent(t, cfg)
	c := dial(t, a.Agent)
	open := func() (fuseboxv1.Agent_SessionClient, error) {
		t.Helper()
		ctx := ctxT(t, 20*time.Second)
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "svc", Instance: "i"}}}); err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv() // the welcome, or the refusal
		return s, err
	}
	first, err := open()
	if err != nil {
		t.Fatalf("session 1: %v", err)
	}
	if _, err := open(); err != nil {
		t.Fatalf("session 2: %v", err)
	}
	_, err = open()
	if status.Code(err) != codes.ResourceExhausted || !contains(err.Error(), "--max-sessions=2") {
		t.Fatalf("session 3 = %v, want ResourceExhausted naming --max-sessions=2", err)
	}
	if got := gather(t, a.Agent)["fusebox_agent_sessions_refused_total"].GetMetric()[0].GetCounter().GetValue(); got != 1 {
		t.Errorf("fusebox_agent_sessions_refused_total = %v, want 1", got)
	}
	if err := first.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for { // bounded by the stream's context deadline (ctxT)
		if _, err := first.Recv(); err != nil {
			break
		}
	}
	sstest.EventuallyNoError(t, 10*time.Second, "a session after one ended", func() error {
		_, err := open()
		return err
	})
}

// TestSocketNeverWiderThan0660: under umask 0 the socket path never shows a
// mode other than 0660, even for an instant (a watcher stats it while the
// agent's listener is created again and again).
func TestSocketNeverWiderThan0660(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(shortTempDir(t), "agent.sock")
	stop := make(chan struct{})
	seen := make(chan os.FileMode, 1)
	go func() {
		defer close(seen)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if fi, err := os.Lstat(path); err == nil && fi.Mode().Perm() != 0o660 {
				seen <- fi.Mode()
				return
			}
		}
	}()
	for range 300 {
		ln, err := listenUnix(path)
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		ln.Close()
	}
	close(stop)
	if m, ok := <-seen; ok {
		t.Fatalf("the socket was visible with mode %v", m)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("closing the listener left %s behind: %v", path, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 0 {
		t.Errorf("left in the socket directory: %v", entries)
	}
}

// TestHTTPIdleConnectionClosed: a kept-alive connection to the agent's HTTP
// server that stays idle is closed by the server.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	cfg := testConfig(t, "idle")
	a := startAgent(t, cfg, WithHTTPTimeouts(HTTPTimeouts{ReadHeader: time.Second, Read: time.Second, Write: time.Second, Idle: 200 * time.Millisecond}))
	sstest.IdleConnectionClosed(t, a.HTTPAddr())
}

// TestKeepalivePingFloodRefused: a client that pings faster than the
// enforcement policy allows gets GOAWAY ENHANCE_YOUR_CALM (too_many_pings).
func TestKeepalivePingFloodRefused(t *testing.T) {
	a := startAgent(t, testConfig(t, "pings"))
	conn, err := net.Dial("unix", a.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server may have closed already
		}
	}
	for { // bounded by the connection's deadline: ReadFrame fails after it
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY before %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeEnhanceYourCalm || string(f.DebugData()) != "too_many_pings" {
				t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", f.ErrCode, f.DebugData())
			}
			return
		}
	}
}
