package simnet

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newNet(t *testing.T, cfg Config) *Network {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func newTr(t *testing.T, n *Network) *Transport {
	t.Helper()
	tr, err := n.NewTransport("")
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// recv waits up to 5 s for a packet on tr.
func recv(t *testing.T, tr *Transport) *memberlist.Packet {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-timer.C:
		t.Fatalf("%s: no packet within 5 s", tr.Addr())
		return nil
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"zero is valid", Config{}, nil},
		{"every link field wrong", Config{Link: Link{Latency: -1, Jitter: -2, Loss: 1.5}},
			[]string{"latency must be >= 0", "jitter must be >= 0", "loss must be in [0, 1], got 1.5"}},
		{"NaN loss", Config{Link: Link{Loss: math.NaN()}}, []string{"loss must be in [0, 1], got NaN"}},
		{"negative sizes", Config{QueueLen: -1, StreamBacklog: -3, ServiceTime: -time.Millisecond},
			[]string{"QueueLen must be >= 0, got -1", "StreamBacklog must be >= 0, got -3", "ServiceTime must be >= 0, got -1ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := New(tc.cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

func TestAddresses(t *testing.T) {
	n := newNet(t, Config{})
	a, b := newTr(t, n), newTr(t, n)
	if a.Addr() == b.Addr() {
		t.Fatalf("two transports at %s", a.Addr())
	}
	ip, port, err := a.FinalAdvertiseAddr("192.0.2.1", 1)
	if err != nil || net.JoinHostPort(ip.String(), strconv.Itoa(port)) != a.Addr() {
		t.Fatalf("FinalAdvertiseAddr = %v %d %v, want %s", ip, port, err, a.Addr())
	}
	c, err := n.NewTransport("10.9.9.9:1234")
	if err != nil || c.Addr() != "10.9.9.9:1234" {
		t.Fatalf("explicit address: %v %v", c, err)
	}
	for _, bad := range []struct{ addr, want string }{
		{"10.9.9.9:1234", "in use"},
		{"nohost", "want ip:port"},
		{"10.1.1.1:0", "port 0"},
	} {
		if _, err := n.NewTransport(bad.addr); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NewTransport(%q) = %v, want an error saying %q", bad.addr, err, bad.want)
		}
	}
	c.Shutdown()
	if _, err := n.NewTransport("10.9.9.9:1234"); err != nil {
		t.Errorf("address not free after Shutdown: %v", err)
	}
	if got := len(n.Addrs()); got != 3 {
		t.Errorf("Addrs() has %d entries, want 3", got)
	}
}

func TestPacketDelivery(t *testing.T) {
	n := newNet(t, Config{})
	a, b := newTr(t, n), newTr(t, n)
	buf := []byte("hello")
	if _, err := a.WriteTo(buf, b.Addr()); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX") // the sender may reuse its buffer at once
	p := recv(t, b)
	if string(p.Buf) != "hello" || p.From.String() != a.Addr() || p.Timestamp.IsZero() {
		t.Fatalf("got %q from %v at %v, want \"hello\" from %s", p.Buf, p.From, p.Timestamp, a.Addr())
	}
	if _, err := a.WriteTo([]byte("lost"), "10.200.0.1:7946"); err != nil {
		t.Fatalf("a packet to nobody must vanish like UDP, got %v", err)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.PacketsSent != 2 || sa.PacketBytesSent != 9 || sa.PacketsUnroutable != 1 || sb.PacketsReceived != 1 || sb.PacketBytesReceived != 5 {
		t.Errorf("stats: sender %+v receiver %+v", sa, sb)
	}
	if tot := n.Stats(); tot.PacketsSent != 2 || tot.PacketsReceived != 1 || tot.Messages() != 2 || tot.Bytes() != 9 {
		t.Errorf("network stats %+v", tot)
	}
}

func TestPacketLatency(t *testing.T) {
	const latency = 30 * time.Millisecond
	n := newNet(t, Config{Link: Link{Latency: latency}})
	a, b := newTr(t, n), newTr(t, n)
	sent := make([]time.Time, 20)
	for i := range sent {
		sent[i], _ = a.WriteTo([]byte{byte(i)}, b.Addr())
	}
	for i := range sent {
		p := recv(t, b)
		if int(p.Buf[0]) != i {
			t.Fatalf("packet %d arrived as number %d: without jitter packets keep their order", p.Buf[0], i)
		}
		if early := p.Timestamp.Sub(sent[i]); early < latency {
			t.Fatalf("packet %d arrived %v after it was sent, before the link's latency %v", i, early, latency)
		}
	}
	// A link of its own overrides the default, both ways.
	c := newTr(t, n)
	if err := n.SetLink(a.Addr(), c.Addr(), Link{}); err != nil {
		t.Fatal(err)
	}
	if err := n.SetLink(a.Addr(), "10.1.2.3:4", Link{}); err == nil || !strings.Contains(err.Error(), "10.1.2.3:4") {
		t.Errorf("SetLink to an unknown address: %v", err)
	}
	if err := n.SetLink(a.Addr(), c.Addr(), Link{Loss: 2}); err == nil {
		t.Error("SetLink accepted loss 2")
	}
	if l, _, _ := n.route(c.Addr(), a.Addr()); l != (Link{}) {
		t.Errorf("c→a link %+v, want the zero link set for a↔c", l)
	}
	if l, _, _ := n.route(b.Addr(), a.Addr()); l.Latency != latency {
		t.Errorf("b→a link %+v, want the default", l)
	}
}

func TestJitterReordersButStaysInRange(t *testing.T) {
	const lat, jit = 5 * time.Millisecond, 20 * time.Millisecond
	n := newNet(t, Config{Seed: 7, Link: Link{Latency: lat, Jitter: jit}})
	a, b := newTr(t, n), newTr(t, n)
	const count = 200
	sent := make([]time.Time, count)
	for i := range sent {
		sent[i], _ = a.WriteTo([]byte{byte(i)}, b.Addr())
	}
	reordered := false
	last := -1
	for range count {
		p := recv(t, b)
		i := int(p.Buf[0])
		if i < last {
			reordered = true
		}
		last = i
		if d := p.Timestamp.Sub(sent[i]); d < lat {
			t.Fatalf("packet %d delayed %v, less than the latency %v", i, d, lat)
		}
	}
	if !reordered {
		t.Error("200 packets with 20 ms of jitter all arrived in order")
	}
}

// TestLossStatistics sends 20,000 packets through a 5% lossy link from one
// goroutine: the losses follow the binomial law, every packet is accounted
// for, and the same seed gives the same fates.
func TestLossStatistics(t *testing.T) {
	const count, loss = 20000, 0.05
	run := func(seed uint64) (Stats, []byte) {
		n := newNet(t, Config{Seed: seed, QueueLen: count, Link: Link{Loss: loss}})
		a, b := newTr(t, n), newTr(t, n)
		for i := range count {
			a.WriteTo([]byte{byte(i), byte(i >> 8)}, b.Addr())
		}
		var got []byte
		for len(b.PacketCh()) > 0 {
			p := <-b.PacketCh()
			got = append(got, p.Buf...)
		}
		s := n.Stats()
		n.Close()
		return s, got
	}
	s1, got1 := run(42)
	mean, sd := count*loss, math.Sqrt(count*loss*(1-loss))
	if lost := float64(s1.PacketsLost); math.Abs(lost-mean) > 5*sd {
		t.Errorf("lost %v of %d at p=%v, want %v ± %.0f (5 sd)", lost, count, loss, mean, 5*sd)
	}
	if s1.PacketsLost+s1.PacketsReceived != count || s1.PacketsDropped != 0 {
		t.Errorf("lost %d + received %d (dropped %d) != sent %d", s1.PacketsLost, s1.PacketsReceived, s1.PacketsDropped, count)
	}
	s2, got2 := run(42)
	if s2 != s1 || !bytes.Equal(got1, got2) {
		t.Errorf("same seed, different fates: %d vs %d lost", s1.PacketsLost, s2.PacketsLost)
	}
	s3, got3 := run(43)
	if bytes.Equal(got1, got3) {
		t.Errorf("seeds 42 and 43 lost the same packets (%d, %d)", s1.PacketsLost, s3.PacketsLost)
	}
}

func TestFullQueueDropsAndNeverBlocks(t *testing.T) {
	n := newNet(t, Config{QueueLen: 4})
	a, b := newTr(t, n), newTr(t, n)
	for range 10 {
		if _, err := a.WriteTo([]byte("x"), b.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	if s := b.Stats(); s.PacketsReceived != 4 || s.PacketsDropped != 6 || b.QueueLen() != 4 {
		t.Fatalf("received %d dropped %d queued %d, want 4 6 4", s.PacketsReceived, s.PacketsDropped, b.QueueLen())
	}
}

func TestPartitionAndHeal(t *testing.T) {
	n := newNet(t, Config{})
	a, b, c := newTr(t, n), newTr(t, n), newTr(t, n)

	err := n.Partition(map[string][]string{"": {a.Addr()}, "x": {a.Addr(), "10.77.0.1:1"}, "y": {a.Addr()}})
	for _, want := range []string{`group name "" is reserved`, `no transport at "10.77.0.1:1"`, `is in groups "x" and "y"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad partition: error %v does not say %q", err, want)
		}
	}
	if n.Group(a.Addr()) != "" {
		t.Fatal("a refused partition changed the groups")
	}

	if err := n.Partition(map[string][]string{"left": {a.Addr(), b.Addr()}}); err != nil {
		t.Fatal(err)
	}
	if n.Group(a.Addr()) != "left" || n.Group(c.Addr()) != "" {
		t.Fatalf("groups: a %q c %q", n.Group(a.Addr()), n.Group(c.Addr()))
	}
	a.WriteTo([]byte("in"), b.Addr())
	if p := recv(t, b); string(p.Buf) != "in" {
		t.Fatalf("same side got %q", p.Buf)
	}
	a.WriteTo([]byte("across"), c.Addr())
	c.WriteTo([]byte("back"), a.Addr())
	if sa, sc := a.Stats(), c.Stats(); sa.PacketsCut != 1 || sc.PacketsCut != 1 || c.QueueLen() != 0 || a.QueueLen() != 0 {
		t.Fatalf("across the partition: a cut %d, c cut %d, queues %d %d", sa.PacketsCut, sc.PacketsCut, a.QueueLen(), c.QueueLen())
	}
	start := time.Now()
	_, err = a.DialTimeout(c.Addr(), 50*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial across the partition: %v, want a timeout", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("dial across the partition failed after %v, before its 50 ms timeout", waited)
	}
	if s := a.Stats(); s.StreamsTimedOut != 1 {
		t.Errorf("StreamsTimedOut = %d", s.StreamsTimedOut)
	}

	n.Heal()
	c.WriteTo([]byte("healed"), a.Addr())
	if p := recv(t, a); string(p.Buf) != "healed" {
		t.Fatalf("after heal got %q", p.Buf)
	}
}

func TestPartitionDropsPacketsInFlight(t *testing.T) {
	n := newNet(t, Config{Link: Link{Latency: 100 * time.Millisecond}})
	a, b := newTr(t, n), newTr(t, n)
	a.WriteTo([]byte("doomed"), b.Addr())
	if err := n.Partition(map[string][]string{"alone": {b.Addr()}}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the in-flight packet to be cut", func() bool { return a.Stats().PacketsCut == 1 })
	if b.Stats().PacketsReceived != 0 || b.QueueLen() != 0 {
		t.Fatal("a packet sent before the partition arrived across it")
	}
}

// dialPair dials from a to b and accepts on b.
func dialPair(t *testing.T, a, b *Transport) (net.Conn, net.Conn) {
	t.Helper()
	cli, err := a.DialTimeout(b.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case srv := <-b.StreamCh():
		return cli, srv
	case <-timer.C:
		t.Fatal("no stream accepted")
		return nil, nil
	}
}

func TestStreams(t *testing.T) {
	n := newNet(t, Config{Seed: 3, Link: Link{Latency: time.Millisecond, Jitter: 5 * time.Millisecond}})
	a, b := newTr(t, n), newTr(t, n)
	cli, srv := dialPair(t, a, b)
	if cli.RemoteAddr().String() != b.Addr() || srv.LocalAddr().String() != b.Addr() ||
		srv.RemoteAddr().String() != cli.LocalAddr().String() {
		t.Errorf("addresses: cli %v→%v srv %v→%v", cli.LocalAddr(), cli.RemoteAddr(), srv.LocalAddr(), srv.RemoteAddr())
	}

	// 1,000 writes with jitter arrive whole and in order.
	var want bytes.Buffer
	for i := range 1000 {
		msg := []byte{byte(i), byte(i >> 8), 0xEE}
		want.Write(msg)
		if _, err := cli.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, want.Len())
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(srv, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("stream bytes arrived out of order or changed")
	}

	// The answer, then EOF after the dialer's close, then a broken pipe.
	srv.Write([]byte("pong"))
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	pong := make([]byte, 4)
	if _, err := io.ReadFull(cli, pong); err != nil || string(pong) != "pong" {
		t.Fatalf("read %q %v", pong, err)
	}
	cli.Close()
	if _, err := srv.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	if _, err := srv.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("write after the peer closed: %v, want EPIPE", err)
	}
	if _, err := cli.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after close: %v, want net.ErrClosed", err)
	}
	if _, err := cli.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after close: %v, want net.ErrClosed", err)
	}
	srv.Close()
	if s := a.Stats(); s.StreamsOpened != 1 || s.StreamBytesSent != uint64(want.Len()) || s.StreamBytesReceived != 4 {
		t.Errorf("dialer stats %+v", s)
	}
	n.mu.RLock()
	open := len(n.conns)
	n.mu.RUnlock()
	if open != 0 {
		t.Errorf("%d streams still tracked after both ends closed", open)
	}
}

func TestStreamDeadlines(t *testing.T) {
	n := newNet(t, Config{})
	a, b := newTr(t, n), newTr(t, n)
	cli, srv := dialPair(t, a, b)
	defer cli.Close()
	defer srv.Close()
	srv.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := srv.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if _, err := srv.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %v", err)
	}
	// A deadline moved while a read waits wakes it.
	srv.SetDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := srv.Read(make([]byte, 1))
		errc <- err
	}()
	srv.SetReadDeadline(time.Now().Add(-time.Second))
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("waiting read after the deadline moved: %v", err)
	}
}

func TestDialRefused(t *testing.T) {
	n := newNet(t, Config{StreamBacklog: 1})
	a, b := newTr(t, n), newTr(t, n)
	if _, err := a.DialTimeout("10.200.0.1:7946", time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to nobody: %v, want connection refused", err)
	}
	c1, err := a.DialTimeout(b.Addr(), time.Second) // fills b's backlog of 1
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if _, err := a.DialTimeout(b.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial into a full backlog: %v, want connection refused", err)
	}
	if s := a.Stats(); s.StreamsRefused != 2 || s.StreamsOpened != 1 {
		t.Errorf("refused %d opened %d", s.StreamsRefused, s.StreamsOpened)
	}
	(<-b.StreamCh()).Close()
}

func TestPartitionResetsStreams(t *testing.T) {
	n := newNet(t, Config{})
	a, b := newTr(t, n), newTr(t, n)
	cli, srv := dialPair(t, a, b)
	defer cli.Close()
	defer srv.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := srv.Read(make([]byte, 1))
		errc <- err
	}()
	if err := n.Partition(map[string][]string{"a": {a.Addr()}}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read across a new partition: %v, want a reset", err)
	}
	if _, err := cli.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write across a new partition: %v, want a reset", err)
	}
	if s := n.Stats(); s.StreamsReset != 2 {
		t.Errorf("StreamsReset = %d, want 2 (both ends)", s.StreamsReset)
	}
}

func TestShutdown(t *testing.T) {
	n := newNet(t, Config{Link: Link{Latency: time.Hour}})
	a, b, c := newTr(t, n), newTr(t, n), newTr(t, n)

	// Streams of a shut-down transport are reset; it sends nothing more.
	cli, srv := dialPairNoLatency(t, n, a, b)
	a.Shutdown()
	a.Shutdown() // idempotent
	if _, err := srv.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("peer of a shut-down transport reads %v", err)
	}
	cli.Close()
	srv.Close()
	if _, err := a.WriteTo([]byte("x"), b.Addr()); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteTo after Shutdown: %v", err)
	}
	if _, err := a.DialTimeout(b.Addr(), time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Dial after Shutdown: %v", err)
	}

	// A packet an hour away and a dial waiting into a partition end with
	// the network, and nothing leaks (goleak in TestMain).
	b.WriteTo([]byte("slow"), c.Addr())
	if err := n.Partition(map[string][]string{"c": {c.Addr()}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var dialErr error
	go func() {
		defer wg.Done()
		_, dialErr = b.DialTimeout(c.Addr(), time.Hour)
	}()
	sstest.Eventually(t, 10*time.Second, "the dial to wait", func() bool { return n.waiting.Load() == 1 })
	n.Close()
	wg.Wait()
	if !errors.Is(dialErr, ErrClosed) {
		t.Errorf("dial blocked across a partition ended with %v, want ErrClosed", dialErr)
	}
	if _, err := n.NewTransport(""); !errors.Is(err, ErrClosed) {
		t.Errorf("NewTransport after Close: %v", err)
	}
	if _, err := b.WriteTo([]byte("x"), c.Addr()); !errors.Is(err, ErrClosed) {
		t.Errorf("Close did not shut the transports down: %v", err)
	}
}

// dialPairNoLatency opens a stream on a network whose default link is slow
// by giving the pair a fast link first.
func dialPairNoLatency(t *testing.T, n *Network, a, b *Transport) (net.Conn, net.Conn) {
	t.Helper()
	if err := n.SetLink(a.Addr(), b.Addr(), Link{}); err != nil {
		t.Fatal(err)
	}
	return dialPair(t, a, b)
}
