package sstest

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// BusyTCP holds a loopback TCP port until the test ends and returns its
// address, host:port: a listener given it fails with "address already in
// use".
func BusyTCP(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// BusyUDP holds a loopback UDP port until the test ends and returns its
// address (the TCP port of the same number is most likely free).
func BusyUDP(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// Buffer is a bytes.Buffer that is safe for concurrent use: a log or a
// process's output that the test reads while something writes it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
