package cliflag

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

func TestListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, err = Listen("http-addr", addr)
	if err == nil || err.Error() != "--http-addr "+addr+": address already in use" || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen on a busy port: %v", err)
	}
	var le *ListenError
	if !errors.As(err, &le) || le.Flag != "http-addr" || le.Addr != addr {
		t.Errorf("not a *ListenError naming the flag: %#v", err)
	}
	_, raw := net.Listen("tcp", addr)
	wrapped := AsListenError("grpc-addr", addr, errors.Join(errors.New("context"), raw))
	if wrapped.Error() != "--grpc-addr "+addr+": address already in use" {
		t.Errorf("AsListenError = %v", wrapped)
	}
	if other := errors.New("not a bind"); AsListenError("grpc-addr", addr, other) != other || AsListenError("x", "", nil) != nil {
		t.Errorf("AsListenError changed an error that is no bind failure")
	}
	if url := AsListenError("embedded-etcd-url", "http://"+addr, raw); url.Error() != "--embedded-etcd-url http://"+addr+": address already in use" {
		t.Errorf("AsListenError of a URL flag = %v", url)
	}
	if AsListenError("gossip-addr", "127.0.0.1:1", raw) != raw {
		t.Errorf("AsListenError blamed --gossip-addr for a bind of another port: %v", raw)
	}
	if AsListenError("other", addr, err) != err {
		t.Errorf("AsListenError wrapped a *ListenError again")
	}
}
