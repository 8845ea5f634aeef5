package scale

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
	"github.com/fusebox-dev/fusebox/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The scale command's flags for TestScale (see cmd/scale).
var (
	scaleConfig = flag.String("scale.config", "", "TestScale: the RunConfig of the part to run, as JSON (empty: skip)")
	scalePart   = flag.String("scale.part", string(Clean), "TestScale: the part to run (clean, lossy)")
	scaleOut    = flag.String("scale.out", "", "TestScale: the file the Row is written to, as JSON")
)

// inBubble runs one part in a synctest bubble of its own, then lets
// virtual time run out memberlist's last probes (SettleTime).
func inBubble(t *testing.T, cfg RunConfig, p Part) (Row, error) {
	t.Helper()
	var row Row
	var err error
	synctest.Test(t, func(t *testing.T) {
		row, err = RunPart(t.Context(), cfg, p, t.TempDir(), logWriter{t})
		time.Sleep(SettleTime)
		synctest.Wait()
	})
	return row, err
}

// TestScale hosts one part of one row of the scale table for the scale
// command (`make scale`), which runs it in a process of its own and reads
// the Row from -scale.out: a bubble needs a test to host it. Without
// -scale.config it is skipped.
func TestScale(t *testing.T) {
	if *scaleConfig == "" {
		t.Skip("the scale command's host: run by `make scale` (agent/lab/scale/cmd/scale)")
	}
	var cfg RunConfig
	if err := json.Unmarshal([]byte(*scaleConfig), &cfg); err != nil {
		t.Fatalf("-scale.config: %v", err)
	}
	p := Part(*scalePart)
	if p != Clean && p != Lossy {
		t.Fatalf("-scale.part %q: want %s or %s", p, Clean, Lossy)
	}
	row, err := inBubble(t, cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	if *scaleOut != "" {
		if err := os.WriteFile(*scaleOut, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// logWriter sends the runs' trace lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestScenarios runs every scenario at N = 50 in virtual time and asserts
// what must hold at any size: every agent rejects a trip, clean or lossy,
// with one record in the end and a transition that costs at most its
// proposers' direct sends beyond the steady traffic; no restarted agent
// allows once ready; the healthy half of a partition never opens and the
// fleet heals by itself (one membership, one record, every client's row
// everywhere); every agent knows every busy dependency's rows; an agent
// calling 1,000 dependencies fits its push-pull in a frame.
func TestScenarios(t *testing.T) {
	const n = 50
	// (b) asserts rows known, not bandwidth: 10 s of it are enough.
	cfg := RunConfig{N: n, Measure: 10 * time.Second, Verbose: testing.Verbose()}
	row, err := inBubble(t, cfg, Clean)
	if err != nil {
		t.Fatal(err)
	}
	lossy, err := inBubble(t, cfg, Lossy)
	if err != nil {
		t.Fatal(err)
	}
	row.Merge(lossy)
	t.Log("\n" + Header + "\n" + row.Markdown())

	t.Run("trip", func(t *testing.T) { checkTrip(t, n, row.Trip) })
	t.Run("lossy trip", func(t *testing.T) {
		checkTrip(t, n, row.Lossy)
		if row.LossyNotStarted != "" {
			t.Error(row.LossyNotStarted)
		}
	})
	t.Run("churn", func(t *testing.T) {
		if want := n / 10; row.Churn.Restarted != want {
			t.Errorf("restarted %d agents, want %d", row.Churn.Restarted, want)
		}
		if row.Churn.HealthyAfterReady != 0 {
			t.Errorf("%d restarted agents allowed dep-a once ready while the fleet held it open", row.Churn.HealthyAfterReady)
		}
	})
	t.Run("partition", func(t *testing.T) {
		r := row.Partition
		if r.SickSideRejecting != n/2 {
			t.Errorf("%d of %d agents of the failing half reject", r.SickSideRejecting, n/2)
		}
		if r.HealthySideRejecting != 0 || r.HealthySideEverOpen != 0 {
			t.Errorf("the healthy half opened: %d reject at the end, %d were open at some point", r.HealthySideRejecting, r.HealthySideEverOpen)
		}
		if !r.Converged {
			t.Errorf("the fleet did not heal by itself within %v: %+v", HealWait, r)
		}
	})
	t.Run("steady", func(t *testing.T) {
		b := row.Steady
		if b.Known != 100 || b.PushPullErr != "" || b.BytesPerAgent <= 0 || b.MsgsPerAgent <= 0 || b.PushPull <= 0 || b.HeapPerAgent == 0 {
			t.Errorf("(b): %+v", b)
		}
		if tr := b.Traffic; tr.UserBytes == 0 || tr.ProbeBytes == 0 || tr.UserBytes+tr.ProbeBytes+tr.MembershipBytes+tr.HeaderBytes() != tr.PacketBytesSent {
			t.Errorf("(b): the breakdown of the bytes does not add up: %+v", tr)
		}
		// (c): agent 0 calls all 1,000 dependencies; its push-pull must
		// carry them whole, in one frame.
		if c := row.Thousand; c.PushPullErr != "" || c.PushPull >= protocol.DefaultMaxFrameSize || c.PushPull < 1000*10 {
			t.Errorf("(c): push-pull of %d bytes: %v", c.PushPull, c.PushPullErr)
		}
	})
}

// checkTrip asserts what a trip must do at any size: every agent rejects,
// they all came to hold one record (Trip waits for it), someone proposed
// it, and beyond the steady traffic the transition cost at most its
// proposers' direct sends plus half the background of the same period
// (gossip varies).
func checkTrip(t *testing.T, n int, r TripResult) {
	t.Helper()
	t.Logf("N=%d: p50 %v p99 %v max %v, %d proposers, %d records (one after %v), +%d packets +%d bytes over %v (baseline %d packets), %d queue drops",
		n, r.P50, r.P99, r.Max, r.Proposers, r.Generations, r.Agree, r.Packets, r.Bytes, r.Window, r.Baseline, r.Dropped)
	if r.Rejecting != n {
		t.Errorf("%d of %d agents reject", r.Rejecting, n)
	}
	if r.Proposers < 1 || r.Proposers > n {
		t.Errorf("%d proposers", r.Proposers)
	}
	// Direct sends: the proposers' records and the failing clients' agents'
	// urgent rows (main sends a row that turns to failures straight to every
	// member), each to the n-1 others.
	const clients = 5
	if bound := int64((r.Proposers+clients)*(n-1)) + r.Baseline/2 + int64(n); r.Packets > bound {
		t.Errorf("the transition cost %d packets beyond the steady rate, more than (%d proposers + %d clients) × %d direct sends + half the baseline %d",
			r.Packets, r.Proposers, clients, n-1, r.Baseline)
	}
}

func TestFleetConfigValidate(t *testing.T) {
	err := FleetConfig{N: 0, Seeds: -1, Net: simnet.Config{QueueLen: -1}}.Validate()
	for _, want := range []string{"N must be at least 1", "Dir is required", "Seeds must be >= 0", "QueueLen must be >= 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

func TestRunConfigValidate(t *testing.T) {
	bad := -1
	err := RunConfig{N: 1, Split: -time.Second, Scenarios: "abz", Tuning: Tuning{RowFanout: &bad}}.Validate()
	for _, want := range []string{"N must be at least 2, got 1", "Split, Measure and ServiceTime must be >= 0", `Scenarios "abz"`, "RowFanout must be in 0..64, got -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	if err := (RunConfig{N: 2}).Validate(); err != nil {
		t.Errorf("a bare N = 2: %v", err)
	}
}

// A row has as many columns as the header, and columns of scenarios that
// did not run say so.
func TestRowMarkdown(t *testing.T) {
	for _, tc := range []struct {
		header, row string
	}{
		{Header, Row{N: 10, Scenarios: "abcdef"}.Markdown()},
		{Header, Row{N: 10, Scenarios: "ad", LossyNotStarted: "x"}.Markdown()},
		{BreakdownHeader, Row{N: 10}.BreakdownMarkdown()},
	} {
		head := strings.SplitN(tc.header, "\n", 2)[0]
		if got, want := strings.Count(tc.row, "|"), strings.Count(head, "|"); got != want {
			t.Errorf("row %q has %d bars, the header %d", tc.row, got, want)
		}
	}
	if r := (Row{N: 10, Scenarios: "a"}).Markdown(); strings.Count(r, "–") != 12 {
		t.Errorf("a row of (a) alone: %q: want 12 columns of –", r)
	}
	if r := (Row{N: 10, Scenarios: "a"}).BreakdownMarkdown(); strings.Count(r, "–") != 9 {
		t.Errorf("a breakdown of (a) alone: %q: want 9 columns of –", r)
	}
}
