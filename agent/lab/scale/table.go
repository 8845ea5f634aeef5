package scale

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Row is one line of the table: every measure at one fleet size (and
// service time, and tuning). Times of the fleet are virtual; Wall, CPU
// and PeakRSS are the host's, measured outside the bubble by the scale
// command, summed (maximum for PeakRSS) over the row's processes.
type Row struct {
	N           int
	ServiceTime time.Duration
	Tuning      string
	Scenarios   string

	Trip      TripResult
	Lossy     TripResult
	Steady    SteadyResult
	Thousand  SteadyResult
	Partition PartitionResult
	Churn     ChurnResult
	Quiet     QuietResult
	// Membership and LossyMembership are how long (virtual) each fleet took
	// to start and reach full membership.
	Membership, LossyMembership time.Duration
	// LossyNotStarted says why (d) was not measured: its fleet did not
	// reach full membership within LossyStartWait ("": it was measured).
	LossyNotStarted string
	// Virtual is the virtual time the row's scenarios took.
	Virtual time.Duration

	Wall    time.Duration
	CPU     time.Duration
	PeakRSS uint64
}

// Merge adds o, another part of the same row, to r.
func (r *Row) Merge(o Row) {
	if o.Lossy.Rejecting > 0 || o.LossyNotStarted != "" {
		r.Lossy, r.LossyNotStarted, r.LossyMembership = o.Lossy, o.LossyNotStarted, o.LossyMembership
	}
	r.Virtual += o.Virtual
	r.Wall += o.Wall
	r.CPU += o.CPU
	r.PeakRSS = max(r.PeakRSS, o.PeakRSS)
}

// Header is the table's header (markdown).
const Header = "| N | host CPU per packet | (a) trip p50 / p99 / max | (a) proposers | (a) transition cost | (d) 5% loss, 20–50 ms: p50 / p99 / max | (d) proposers | (b) per agent: KB/s, msgs/s | (b) memberlist's share of packet bytes | (b) deps every agent knows | (b) push-pull | (b) heap per agent | (c) push-pull | (c) heap per agent | (e) healthy half opened | (e) converged after heal | (f) restarted / allowed once ready | virtual s, wall s, CPU s, peak RSS |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

// Markdown formats the row under Header.
func (r Row) Markdown() string {
	trip := func(t TripResult) string {
		return fmt.Sprintf("%s / %s / %s", ms(t.P50), ms(t.P99), ms(t.Max))
	}
	heal := fmt.Sprintf("not within %v: then %d of %d agents counted every member, %d had every client's row, %d held the same record",
		HealWait, r.Partition.Members, r.N, r.Partition.Rows, r.Partition.Records)
	if r.Partition.Converged {
		heal = fmt.Sprintf("%.1f s", r.Partition.Converge.Seconds())
	}
	lossy, lossyProposers := trip(r.Lossy), fmt.Sprint(r.Lossy.Proposers)
	if r.LossyNotStarted != "" {
		lossy, lossyProposers = fmt.Sprintf("not measured: no full membership within %v", LossyStartWait), "–"
	}
	svc := "0"
	if r.ServiceTime > 0 {
		svc = fmt.Sprintf("%.0f µs", float64(r.ServiceTime)/float64(time.Microsecond))
	}
	n := fmt.Sprint(r.N)
	if r.Tuning != "" {
		n += " (" + r.Tuning + ")"
	}
	cols := []string{
		n,
		svc,
		trip(r.Trip),
		fmt.Sprint(r.Trip.Proposers),
		fmt.Sprintf("%d packets, %.1f KB", max(r.Trip.Packets, 0), float64(max(r.Trip.Bytes, 0))/1000),
		lossy,
		lossyProposers,
		fmt.Sprintf("%.1f, %.0f", r.Steady.BytesPerAgent/1000, r.Steady.MsgsPerAgent),
		fmt.Sprintf("%.0f%%", 100*r.Steady.OwnShare()),
		fmt.Sprintf("%d of %d", r.Steady.Known, r.Steady.Deps),
		kb(r.Steady.PushPull, r.Steady.PushPullErr),
		mb(r.Steady.HeapPerAgent),
		kb(r.Thousand.PushPull, r.Thousand.PushPullErr),
		mb(r.Thousand.HeapPerAgent),
		fmt.Sprintf("%d of %d", r.Partition.HealthySideEverOpen, r.N-r.N/2),
		heal,
		fmt.Sprintf("%d / %d", r.Churn.Restarted, r.Churn.HealthyAfterReady),
		fmt.Sprintf("%.0f, %.0f, %.0f, %.1f GB", r.Virtual.Seconds(), r.Wall.Seconds(), r.CPU.Seconds(), float64(r.PeakRSS)/1e9),
	}
	// Columns by scenario letter; "-": always set.
	letters := "--aaaddbbbbbcceef-"
	for i, l := range letters {
		if l != '-' && !strings.ContainsRune(r.Scenarios, l) {
			cols[i] = "–"
		}
	}
	return "| " + strings.Join(cols, " | ") + " |"
}

// BreakdownHeader is the header of the breakdown table (markdown): where
// each agent's bytes went in scenario (b).
const BreakdownHeader = "| N | host CPU per packet | before (b): membership gossip per agent, KB/s: peak, mean; quiet after | (b) per agent, KB/s: all | rows and records | memberlist's probes | membership gossip | packet headers | streams (push-pull, joins) | (b) packets per agent per s: sent, dropped | (b) CPU per packet received; signature checks per packet the shared memo answered |\n" +
	"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

// BreakdownMarkdown formats the row's breakdown under BreakdownHeader.
func (r Row) BreakdownMarkdown() string {
	s, secs, n := r.Steady.Traffic, r.Steady.Seconds, float64(r.N)
	per := func(b uint64) string {
		if secs <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", float64(b)/secs/n/1000)
	}
	perPkt := "–"
	if r.Steady.CPUPerPacket > 0 {
		perPkt = fmt.Sprintf("%.0f µs; %.1f", float64(r.Steady.CPUPerPacket)/float64(time.Microsecond), r.Steady.ChecksSavedPerPacket)
	}
	svc := "0"
	if r.ServiceTime > 0 {
		svc = fmt.Sprintf("%.0f µs", float64(r.ServiceTime)/float64(time.Microsecond))
	}
	nn := fmt.Sprint(r.N)
	if r.Tuning != "" {
		nn += " (" + r.Tuning + ")"
	}
	pkts := "–"
	if secs > 0 {
		pkts = fmt.Sprintf("%.1f, %.2f", float64(s.PacketsSent)/secs/n, float64(s.PacketsDropped)/secs/n)
	}
	q := r.Quiet
	wave := fmt.Sprintf("%.1f, %.1f; %.0f s", q.PeakBytesPerAgent/1000, q.MembershipBytesPerAgent/1000, q.After.Seconds())
	switch {
	case !strings.ContainsAny(r.Scenarios, "bc"):
		wave = "–"
	case !q.Quiet:
		wave = fmt.Sprintf("%.1f, %.1f; not within %v", q.PeakBytesPerAgent/1000, q.MembershipBytesPerAgent/1000, QuietWait)
	}
	return "| " + strings.Join([]string{nn, svc, wave, per(s.Bytes()), per(s.UserBytes), per(s.ProbeBytes), per(s.MembershipBytes),
		per(s.HeaderBytes()), per(s.StreamBytesSent), pkts, perPkt}, " | ") + " |"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
func mb(b uint64) string        { return fmt.Sprintf("%.2f MB", float64(b)/1e6) }
func kb(b int, err string) string {
	if err != "" {
		return "over the frame limit: " + err
	}
	return fmt.Sprintf("%.1f KB", float64(b)/1000)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// machine describes the CPU: model and count.
func machine() string {
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d × %s, %s", runtime.NumCPU(), model, runtime.GOOS)
}
