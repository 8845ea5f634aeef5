package sstest

import (
	"net"
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
