package agent

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// procStatusKB reads a "VmRSS:"-style line of /proc/self/status, in KiB
// (0 where there is none).
func procStatusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkAgentAtTheCap sizes the agent: one agent at --max-dependencies
// (FUSEBOX_SIZING_DEPS, default DefaultMaxDependencies) with every
// dependency in use — local traffic, rows from four other agents, and a
// client session following every dependency — scraped at /metrics. It
// reports the live heap, the process's RSS, its peak RSS across the scrape
// (VmHWM, reset before it) and the scrape's size; deploy/README.md, "Sizing", chooses
// the defaults and the manifests' memory limits from them:
//
//	go test -run '^$' -bench AgentAtTheCap -benchtime 1x ./agent/
//	FUSEBOX_SIZING_DEPS=5000 go test -run '^$' -bench AgentAtTheCap -benchtime 1x ./agent/
func BenchmarkAgentAtTheCap(b *testing.B) {
	n := DefaultMaxDependencies
	if v, err := strconv.Atoi(os.Getenv("FUSEBOX_SIZING_DEPS")); err == nil && v > 0 {
		n = v
	}
	cfg := testConfig(b, "sizing")
	cfg.MaxDependencies, cfg.MaxRowsPerNode = n, n
	cfg.LogLevel = "warn"
	a := startAgent(b, cfg, WithDefaultPolicy(benchPolicy()))
	dep := func(i int) string { return fmt.Sprintf("service-%05d.example.internal:443", i) } // 40 bytes
	for i := range n {
		if err := a.eng.AddCounts(dep(i), sharedstate.Counts{FirstAttempts: 100, Successes: 95, Failures: 5, SlowCalls: 1}); err != nil {
			b.Fatal(err)
		}
		a.confirm(dep(i)) // gossiped, as a client's on the socket
		for p := range 4 {
			if _, err := a.eng.MergeRow(sharedstate.NodeWindow{Node: fmt.Sprintf("peer-%d", p), Zone: "z1", Dependency: dep(i), Seq: uint64(i + 1),
				Counts: sharedstate.Counts{FirstAttempts: 100, Successes: 90, Failures: 10}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	a.tick()
	s, err := dial(b, a.Agent).Session(ctxT(b, 10*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{Service: "sizing"}}}); err != nil {
		b.Fatal(err)
	}
	var subs []string
	for i := range n {
		subs = append(subs, dep(i))
	}
	if err := s.Send(&fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Deltas{Deltas: &fuseboxv1.CountDeltas{Subscribe: subs}}}); err != nil {
		b.Fatal(err)
	}
	pushed := 0
	for pushed < n { // the welcome, then snapshots of every dependency
		m, err := s.Recv()
		if err != nil {
			b.Fatal(err)
		}
		pushed += len(m.GetUpdate().GetSnapshots())
	}
	var ms runtime.MemStats
	b.ReportAllocs()
	b.ResetTimer()
	var scraped int64
	var heap, rss, peak float64
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		heap = float64(ms.HeapInuse) / (1 << 20)
		rss = float64(procStatusKB("VmRSS")) / 1024
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM to VmRSS
		resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		scraped, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		peak = float64(procStatusKB("VmHWM")) / 1024
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "deps")
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(peak, "peak-rss-MiB")
	b.ReportMetric(float64(scraped)/(1<<20), "scrape-MiB")
}
