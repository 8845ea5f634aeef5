package redisstore_test

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// redisServer is a real redis-server started for one test, listening on a
// unix socket in a temp dir and, when asked, on a free loopback port.
type redisServer struct {
	cmd  *exec.Cmd
	dir  string
	sock string
	addr string // "127.0.0.1:port" when TCP was asked for
}

// startRedis starts Debian's redis-server. Without the binary the test
// is skipped with a clear message, except in CI (CI=true), where it fails.
func startRedis(t testing.TB, tcp bool) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not installed (Debian: apt-get install -y redis-server; `make test` installs it): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir, err := os.MkdirTemp("", "redis") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &redisServer{dir: dir, sock: filepath.Join(dir, "redis.sock")}
	port := "0" // no TCP listener
	if tcp {
		port = freePort(t)
		s.addr = "127.0.0.1:" + port
	}
	s.cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--unixsocket", s.sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	t.Cleanup(s.stop)
	rdb := s.client(t)
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server did not answer PING within 10 s; its log:\n%s", log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// stop ends the server (SIGTERM) and waits for it.
func (s *redisServer) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// client returns a client on the unix socket, closed at the end of the test.
func (s *redisServer) client(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: s.sock,
		DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// tcpClient returns a client over loopback TCP.
func (s *redisServer) tcpClient(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// freePort asks the kernel for a free loopback port. redis-server cannot
// listen on port 0, so the port is passed on: another process could take it
// in between, which startRedis then reports.
func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// prefix is a fresh key prefix, so tests sharing a server do not meet.
func prefix() string { return "test:" + rand.Text() + ":" }

// pause stops the server without ending it (SIGSTOP): connections stay
// open and nothing answers, as across a dropped link. It is continued at
// cleanup, before stop.
func (s *redisServer) pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Signal(syscall.SIGCONT) })
}
