package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded/embeddedtest"
)

// countingKV counts the keys Get returns: what a read costs.
type countingKV struct {
	clientv3.KV
	keys atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := c.KV.Get(ctx, key, opts...)
	if err == nil {
		c.keys.Add(int64(len(resp.Kvs)))
	}
	return resp, err
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

const trailSize = 100_000

// seedTrail writes a trail of trailSize entries in the store's format
// (audit/<seq> and its audit-index copy), entry i at base+i seconds, about
// dependency dep-<i%50>, except a few about "rare": 10, 20 and trailSize-5.
func seedTrail(t *testing.T, cli *clientv3.Client, base time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const perTxn = 256 // two puts each: within the server's MaxTxnOps
	batches := make(chan int)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 2 { // parallel transactions: etcd batches their proposals
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := range batches {
				var ops []clientv3.Op
				for i := from; i < from+perTxn && i <= trailSize; i++ {
					dep := fmt.Sprintf("dep-%d", i%50)
					if i == 10 || i == 20 || i == trailSize-5 {
						dep = "rare"
					}
					rec, _ := json.Marshal(map[string]any{"actor": "seed", "action": store.ActionPolicyPut, "dependency": dep,
						"at": base.Add(time.Duration(i) * time.Second)})
					seq := fmt.Sprintf("%020d", i)
					ops = append(ops, clientv3.OpPut("/fusebox/audit/"+seq, string(rec)),
						clientv3.OpPut("/fusebox/audit-index/"+url.PathEscape(dep)+"/"+seq, string(rec)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for from := 1; from <= trailSize; from += perTxn {
		select {
		case batches <- from:
		case err := <-errs:
			close(batches)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// TestAuditTrailOf100000 seeds 100,000 entries, then: a dependency's entries
// are listed reading only those entries; trimming by age and by count
// deletes the oldest, leaves one summary entry per trim and cleans the index.
func TestAuditTrailOf100000(t *testing.T) {
	if os.Getenv("FUSEBOX_LARGE_TESTS") == "" {
		t.Skip("seeds 100,000 entries (minutes on a loaded machine): set FUSEBOX_LARGE_TESTS=1")
	}
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.MaxTxnOps = 4096 })
	seedCli := embeddedtest.Client(t, srv)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	started := time.Now()
	seedTrail(t, seedCli, base)
	t.Logf("seeded %d entries in %v", trailSize, time.Since(started))

	cli := embeddedtest.Client(t, srv) // reads through counting
	counting := &countingKV{KV: cli.KV}
	cli.KV = counting
	now := base.Add(trailSize*time.Second + time.Minute)
	st, err := store.New(store.Config{Client: cli, Clock: fixedClock{now}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // the trims delete 99,000 keys
	defer cancel()

	entries, err := st.ListAudit(ctx, store.AuditQuery{Dependency: "rare", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[0].Seq != trailSize-5 || entries[1].Seq != 20 || entries[2].Seq != 10 {
		t.Fatalf("rare's entries: %+v", entries)
	}
	if n := counting.keys.Load(); n > 10 {
		t.Fatalf("listing 3 entries of one dependency read %d keys of a %d-entry trail", n, trailSize)
	}
	counting.keys.Store(0)
	if entries, err := st.ListAudit(ctx, store.AuditQuery{Dependency: "dep-7", Limit: 5}); err != nil || len(entries) != 5 {
		t.Fatalf("dep-7: %d entries, %v", len(entries), err)
	}
	if n := counting.keys.Load(); n > 10 {
		t.Fatalf("listing 5 entries of dep-7 read %d keys", n)
	}

	// By age: entries older than 40,000 s before now go: seqs 1..60,059.
	res, err := st.TrimAuditRetention(ctx, store.AuditRetention{MaxAge: 40_000 * time.Second}, "coordinator-a")
	if err != nil {
		t.Fatal(err)
	}
	wantCut := int64(trailSize + 60 - 40_000) // the first entry at or after now-40,000s
	if res.FromSeq != 1 || res.ToSeq != wantCut-1 || res.Deleted != wantCut-1 || res.SummarySeq != trailSize+1 {
		t.Fatalf("age trim: %+v, want 1..%d deleted, summary %d", res, wantCut-1, trailSize+1)
	}
	// By count: 1,000 kept, the new summary included.
	res, err = st.TrimAuditRetention(ctx, store.AuditRetention{MaxEntries: 1000}, "coordinator-a")
	if err != nil {
		t.Fatal(err)
	}
	if res.FromSeq != wantCut || res.ToSeq != trailSize+1-999 || res.SummarySeq != trailSize+2 {
		t.Fatalf("count trim: %+v", res)
	}
	all, err := st.ListAudit(ctx, store.AuditQuery{Limit: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1000 || all[0].Seq != trailSize+2 || all[0].Action != store.ActionAuditTrim || all[0].Actor != "coordinator-a" {
		t.Fatalf("after trimming: %d entries, newest %+v", len(all), all[0])
	}
	var sum struct {
		Deleted, FromSeq, ToSeq int64
		MaxEntries              int
	}
	if err := json.Unmarshal(all[0].After, &sum); err != nil || sum.Deleted != res.Deleted || sum.MaxEntries != 1000 {
		t.Fatalf("summary %s: %+v, %v", all[0].After, sum, err)
	}
	if entries, err := st.ListAudit(ctx, store.AuditQuery{Dependency: "rare"}); err != nil || len(entries) != 1 || entries[0].Seq != trailSize-5 {
		t.Fatalf("rare after trimming: %+v, %v", entries, err)
	}
	idx, err := seedCli.Get(ctx, "/fusebox/audit-index/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || idx.Count != 998 { // the 998 kept policy entries; summaries have no dependency
		t.Fatalf("index after trimming holds %d keys (%v), want 998", idx.Count, err)
	}
	// Nothing due: no summary.
	if res, err := st.TrimAuditRetention(ctx, store.AuditRetention{MaxEntries: 1000}, "coordinator-a"); err != nil || res.Deleted != 0 || res.SummarySeq != 0 {
		t.Fatalf("a trim with nothing due: %+v, %v", res, err)
	}
}

// TestAuditRetentionByAge: entries written 10 s apart on the store's clock;
// a trim by age deletes exactly those older than MaxAge before now (an entry
// at the cutoff itself stays), the oldest first, leaves one summary entry
// and cleans the index; a MaxAge longer than the trail deletes nothing. The
// quick, default-run companion of TestAuditTrailOf100000's age trim.
func TestAuditRetentionByAge(t *testing.T) {
	srv := embeddedtest.Start(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := sharedstate.NewManualClock(base)
	st, err := store.New(store.Config{Client: embeddedtest.Client(t, srv), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	const n = 10 // seqs 1..10 at base+0s, +10s, … +90s
	for i := range n {
		clock.Set(base.Add(time.Duration(i) * 10 * time.Second))
		if _, err := st.PutPolicy(ctx, fmt.Sprintf("dep-%d", i%3), []byte(`{"breaker":{"minimumRequests":7}}`), as("op")); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(base.Add(100 * time.Second))
	// Longer than the trail's age: nothing is due, and no summary is written.
	if res, err := st.TrimAuditRetention(ctx, store.AuditRetention{MaxAge: 101 * time.Second}, "trimmer"); err != nil || res.Deleted != 0 || res.SummarySeq != 0 {
		t.Fatalf("a trim with nothing older than MaxAge: %+v, %v", res, err)
	}
	// 40 s before now is base+60s, the time of seq 7: seqs 1..6 are older.
	res, err := st.TrimAuditRetention(ctx, store.AuditRetention{MaxAge: 40 * time.Second}, "trimmer")
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 6 || res.FromSeq != 1 || res.ToSeq != 6 || res.SummarySeq != n+1 || res.MaxAge != 40*time.Second {
		t.Fatalf("age trim: %+v, want seqs 1..6 deleted and summary %d", res, n+1)
	}
	all, err := st.ListAudit(ctx, store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, e := range all {
		seqs = append(seqs, e.Seq)
	}
	if want := []int64{11, 10, 9, 8, 7}; !slices.Equal(seqs, want) {
		t.Fatalf("entries after the trim: %v, want %v (newest first)", seqs, want)
	}
	if a := all[0]; a.Action != store.ActionAuditTrim || a.Actor != "trimmer" || !a.At.Equal(base.Add(100*time.Second)) {
		t.Fatalf("summary entry %+v", a)
	}
	var sum struct {
		Deleted, FromSeq, ToSeq int64
		MaxAge                  string
	}
	if err := json.Unmarshal(all[0].After, &sum); err != nil || sum.Deleted != 6 || sum.FromSeq != 1 || sum.ToSeq != 6 || sum.MaxAge != "40s" {
		t.Fatalf("summary %s: %+v, %v", all[0].After, sum, err)
	}
	// The index lost the same entries: dep-0 had seqs 1, 4, 7, 10.
	if e, err := st.ListAudit(ctx, store.AuditQuery{Dependency: "dep-0"}); err != nil || len(e) != 2 || e[0].Seq != 10 || e[1].Seq != 7 {
		t.Fatalf("dep-0 after the trim: %+v, %v", e, err)
	}
	// Everything older than a second: the newest entry (the summary) stays.
	clock.Set(base.Add(time.Hour))
	if res, err := st.TrimAuditRetention(ctx, store.AuditRetention{MaxAge: time.Second}, "trimmer"); err != nil || res.FromSeq != 7 || res.ToSeq != 10 || res.SummarySeq != 12 {
		t.Fatalf("trim of an old trail: %+v, %v, want seqs 7..10 deleted, summary 12", res, err)
	}
}

// TestAuditRetentionOneTrimmerAtATime: two writers run the retention loop;
// only the elected one trims, and when it stops the other takes over.
func TestAuditRetentionOneTrimmerAtATime(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	for i := range 10 {
		if _, err := e.st.PutPolicy(ctx, "dep", []byte(fmt.Sprintf(`{"retry": {"maxAttempts": %d}}`, i%5+1)), as("alice")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	trimmers := map[string]int{}
	run := func(name string) context.CancelFunc {
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = e.st.RunAuditRetention(rctx, store.AuditRetentionConfig{
				Retention: store.AuditRetention{MaxEntries: 3}, Every: 50 * time.Millisecond, Candidate: name, SessionTTL: 1,
				OnTrim: func(r store.AuditTrim, err error) {
					mu.Lock()
					defer mu.Unlock()
					trimmers[name]++
				},
			})
		}()
		return func() { cancel(); <-done }
	}
	stopA := run("a")
	defer stopA()
	sstest.Eventually(t, 10*time.Second, "a trims", func() bool { mu.Lock(); defer mu.Unlock(); return trimmers["a"] >= 3 })
	stopB := run("b")
	defer stopB()
	before := func() int { mu.Lock(); defer mu.Unlock(); return trimmers["a"] }()
	sstest.Eventually(t, 10*time.Second, "a keeps trimming", func() bool { mu.Lock(); defer mu.Unlock(); return trimmers["a"] >= before+5 })
	mu.Lock()
	if trimmers["b"] != 0 {
		t.Errorf("b trimmed %d times while a led", trimmers["b"])
	}
	mu.Unlock()
	stopA()
	sstest.Eventually(t, 15*time.Second, "b takes over", func() bool { mu.Lock(); defer mu.Unlock(); return trimmers["b"] >= 1 })
	all, err := e.st.ListAudit(ctx, store.AuditQuery{})
	if err != nil || len(all) != 3 || all[0].Action != store.ActionAuditTrim {
		t.Fatalf("trail after trimming: %+v, %v", all, err)
	}
}
