package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// parseEvents parses watch -o json's output: one object per line.
func parseEvents(t *testing.T, out string) []eventDoc {
	t.Helper()
	var evs []eventDoc
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e eventDoc
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("watch line %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// readLine reads one line of r within d.
func readLine(t *testing.T, r *bufio.Reader, d time.Duration) string {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		lines <- line
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case line := <-lines:
		if line == "" {
			t.Fatal("output ended")
		}
		return line
	case <-timer.C:
		t.Fatalf("no line within %v", d)
	}
	return ""
}

// startWatch starts fuseboxctl watch with args and waits until the
// coordinator has subscribed it ("watching" on stderr).
func startWatch(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, stdout, stderr *bufio.Reader) {
	t.Helper()
	cmd = ctlCommand(t, nil, env, append([]string{"watch"}, args...)...)
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr = bufio.NewReader(outPipe), bufio.NewReader(errPipe)
	waitLine(t, stderr, "fuseboxctl: watching", 10*time.Second)
	return cmd, stdout, stderr
}

// waitOutput reads the watch's stdout to its end and fails the test unless
// the watch then exits with status 0.
func waitOutput(t *testing.T, cmd *exec.Cmd, stdout io.Reader) []byte {
	t.Helper()
	out, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch: %v; stdout %s", err, out)
	}
	return out
}

// TestWatchOverrideSetAndClearedQuickly is the case the polling watch
// missed: both changes are printed, in order, as JSON lines.
func TestWatchOverrideSetAndClearedQuickly(t *testing.T) {
	c := startCoordinator(t, false)
	cmd, stdout, _ := startWatch(t, []string{"FUSEBOX_COORDINATOR=" + c.GRPCAddr()}, "--count", "2", "-o", "json")
	a := adminConn(t, c)
	ctx := t.Context()
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "payments", Reason: "drill", Actor: "eve"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: "payments"}); err != nil {
		t.Fatal(err)
	}
	out := waitOutput(t, cmd, stdout)
	evs := parseEvents(t, string(out))
	if len(evs) != 2 {
		t.Fatalf("watch --count 2 printed %d events: %s", len(evs), out)
	}
	if e := evs[0]; e.Type != "override" || e.Dependency != "payments" || e.State != "forced-open" || e.Reason != "drill" ||
		e.Actor != "eve (loopback)" || e.Revision == 0 || e.At.IsZero() {
		t.Errorf("first event = %+v", e)
	}
	if e := evs[1]; e.Type != "override" || e.Dependency != "payments" || e.State != "none" || e.ID != evs[0].ID+1 {
		t.Errorf("second event = %+v, want the override cleared, ID %d", e, evs[0].ID+1)
	}
	// The keys are those of /api/v1/events; empty ones are left out.
	if !strings.Contains(string(out), `"type":"override"`) || strings.Contains(string(out), `"zone"`) {
		t.Errorf("JSON lines: %s", out)
	}
}

func TestWatchTableFilteredByDependency(t *testing.T) {
	c := startCoordinator(t, false)
	cmd, stdout, _ := startWatch(t, []string{"FUSEBOX_COORDINATOR=" + c.GRPCAddr()},
		"--dependency", "search", "--count", "1")
	a := adminConn(t, c)
	ctx := t.Context()
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "payments"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "search", Reason: "known noisy", Actor: "ann",
		Ttl: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	out := waitOutput(t, cmd, stdout)
	line := strings.TrimSpace(string(out))
	for _, want := range []string{"override", "search", "forced-closed", "until ", "by ann (loopback)", `"known noisy"`} {
		if !strings.Contains(line, want) {
			t.Errorf("table line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "payments") || strings.Count(line, "\n") != 0 {
		t.Errorf("--dependency search printed %q", out)
	}
}

// TestWatchResumesAfterADrop cuts watch's connection, makes changes while
// it cannot reconnect, and checks it prints them once each when it can.
func TestWatchResumesAfterADrop(t *testing.T) {
	c := startCoordinator(t, false)
	p := startProxy(t, c.GRPCAddr())
	cmd, stdout, stderr := startWatch(t, []string{"FUSEBOX_COORDINATOR=" + p.addr()}, "--count", "4", "-o", "json", "--timeout", "30s")
	a := adminConn(t, c)
	ctx := t.Context()
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "a"}); err != nil {
		t.Fatal(err)
	}
	first := parseEvents(t, readLine(t, stdout, 10*time.Second))[0]

	p.cut()
	waitLine(t, stderr, "dropped", 10*time.Second)
	// Two changes while watch is cut off; a stream of the test's own says
	// when the coordinator has published them.
	mine, err := a.Watch(ctx, &fuseboxv1.WatchRequest{AfterId: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	if md, err := mine.Header(); err != nil || md == nil {
		_, err = mine.Recv()
		t.Fatalf("the test's own stream: %v", err)
	}
	if _, err := a.ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ClearOverride(ctx, &fuseboxv1.ClearOverrideRequest{Dependency: "a"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := mine.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	p.resume()
	waitLine(t, stderr, fmt.Sprintf("watching %s again, after event %d", p.addr(), first.ID), 30*time.Second)
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "c"}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for i := 0; i < 3; i++ {
		out.WriteString(readLine(t, stdout, 10*time.Second))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch: %v; stdout %s", err, out.String())
	}
	evs := parseEvents(t, out.String())
	want := []string{"b:forced-closed", "a:none", "c:forced-open"}
	for i, e := range evs {
		if got := e.Dependency + ":" + e.State; got != want[i] || e.ID != first.ID+uint64(i+1) {
			t.Fatalf("after the drop watch printed %+v, want %v with IDs from %d: nothing missed, nothing twice", evs, want, first.ID+1)
		}
	}
}

func TestWatchUnreachable(t *testing.T) {
	addr := closedAddr(t)
	ctl(t, nil, []string{"FUSEBOX_COORDINATOR=" + addr}, "watch").want(t, 4, nil, []string{"coordinator " + addr + " unreachable"})
	// --interval (of the polling watch) is still accepted, with a note.
	ctl(t, nil, []string{"FUSEBOX_COORDINATOR=" + addr}, "watch", "--interval", "1s").
		want(t, 4, nil, []string{"--interval is deprecated", addr})
	ctl(t, nil, nil, "watch", "--count", "-1").want(t, 1, nil, []string{"--count -1"})

	// A coordinator that goes away for longer than --timeout.
	c := startCoordinator(t, false)
	cmd, _, stderr := startWatch(t, []string{"FUSEBOX_COORDINATOR=" + c.GRPCAddr()}, "--timeout", "1s")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stderr)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Fatalf("watch of a coordinator that went away: %v, want exit 4; stderr %s", err, rest)
	}
	for _, want := range []string{"dropped", "coordinator " + c.GRPCAddr() + " unreachable"} {
		if !strings.Contains(string(rest), want) {
			t.Errorf("stderr lacks %q: %s", want, rest)
		}
	}
}

// proxy forwards TCP connections to a target until cut: then it closes
// them all and refuses new ones (accepts and closes them) until resumed.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	open  bool
	conns map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, open: true, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for { // bounded by the listener, closed at cleanup
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || !p.open {
			p.mu.Unlock()
			down.Close()
			if up != nil {
				up.Close()
			}
			continue
		}
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		for _, pair := range [][2]net.Conn{{up, down}, {down, up}} {
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(pair[0], pair[1])
				pair[0].Close()
				pair[1].Close()
			}()
		}
	}
}

// cut closes every forwarded connection and refuses new ones.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = false
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = true
}
