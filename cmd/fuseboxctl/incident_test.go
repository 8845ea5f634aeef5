package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestStatusCountsWhatTheAgentsDo: status counts each dependency once as
// the dashboard does — an override first, then shadow mode, then the
// breaker — so a forced-open dependency (whose breaker is closed) is not
// counted as closed.
func TestStatusCountsWhatTheAgentsDo(t *testing.T) {
	c := startCoordinator(t, false)
	ctx := context.Background()
	a := adminConn(t, c)
	if _, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "payments", Reason: "failover", Actor: "eve"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store().PutPolicy(ctx, "search", []byte(`{"breaker":{"mode":"shadow"}}`), store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store().PutPolicy(ctx, "billing", []byte(`{"retry":{"maxAttempts":2}}`), store.WriteOptions{Actor: "setup"}); err != nil {
		t.Fatal(err)
	}
	const want = "Dependencies:  3: 1 closed, 0 open, 0 half-open, 1 forced-open, 0 forced-closed, 1 shadow"
	var r result
	deadline := time.Now().Add(10 * time.Second)
	for { // the fleet view follows etcd's watch
		r = ctl(t, c, nil, "status")
		if strings.Contains(r.stdout, want) || time.Now().After(deadline) {
			break
		}
	}
	r.want(t, 0, []string{want, "Overrides:     1 forced-open, 0 forced-closed", "EFFECTIVE", "payments"}, nil)
	if line := grepLines(r.stdout, "payments"); !strings.Contains(line, "forced-open") || !strings.Contains(line, "failover") {
		t.Errorf("payments' row %q, want forced-open and its reason", line)
	}
	r = ctl(t, c, nil, "status", "-o", "json")
	var st statusDoc
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if st.Counts["closed"] != 1 || st.Counts["forced-open"] != 1 || st.Counts["shadow"] != 1 || st.Counts["open"] != 0 {
		t.Errorf("status -o json counts = %v", st.Counts)
	}
	for _, d := range st.Dependencies {
		if d.Dependency == "payments" && (d.Effective != "forced-open" || d.State != "closed") {
			t.Errorf("payments = %+v, want effective forced-open over a closed breaker", d)
		}
	}
}

// TestDepShowNamesTheOverridesAuthorAndExpiry: dep show says who set the
// override and until when, beside its reason.
func TestDepShowNamesTheOverridesAuthorAndExpiry(t *testing.T) {
	c := startCoordinator(t, false)
	ctx := context.Background()
	ov, err := adminConn(t, c).ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "payments", Reason: "db failover",
		Actor: "eve", Ttl: durationpb.New(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	expires := ov.GetExpires().AsTime().UTC()
	want := "Override:     forced-open until " + expires.Format(time.RFC3339)
	var r result
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = ctl(t, c, nil, "dep", "show", "payments")
		if strings.Contains(r.stdout, want) || time.Now().After(deadline) {
			break
		}
	}
	r.want(t, 0, []string{want, "left), set by eve (loopback): \"db failover\""}, nil)
	r = ctl(t, c, nil, "dep", "show", "payments", "-o", "json")
	var d dependencyDoc
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatal(err)
	}
	if d.OverrideActor != "eve (loopback)" || d.OverrideExpires == nil || !d.OverrideExpires.Equal(expires) || d.Effective != "forced-open" {
		t.Errorf("dep show -o json = %+v", d)
	}
	if _, err := adminConn(t, c).ForceClosed(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "payments", Actor: "ann"}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		r = ctl(t, c, nil, "dep", "show", "payments")
		if strings.Contains(r.stdout, "forced-closed") || time.Now().After(deadline) {
			break
		}
	}
	r.want(t, 0, []string{"Override:     forced-closed until cleared, set by ann (loopback)"}, nil)
}

// TestAuditShowsFieldChanges: audit shows what each policy write changed,
// field by field, as the dashboard does (it said "created" or "updated").
func TestAuditShowsFieldChanges(t *testing.T) {
	c := startCoordinator(t, false)
	first := writeFile(t, "first.json", `{"dependency":"shipping","breaker":{"minimumRequests":50}}`)
	second := writeFile(t, "second.json", `{"dependency":"shipping","breaker":{"minimumRequests":60,"window":"5s"},"retry":{"maxAttempts":2}}`)
	ctl(t, c, nil, "policy", "set", "--yes", "-f", first).want(t, 0, nil, nil)
	ctl(t, c, nil, "policy", "set", "--yes", "-f", second).want(t, 0, nil, nil)
	ctl(t, c, nil, "policy", "set", "--yes", "-f", second).want(t, 0, nil, nil)
	ctl(t, c, nil, "policy", "rm", "--yes", "shipping").want(t, 0, nil, nil)
	r := ctl(t, c, nil, "audit", "--dependency", "shipping")
	r.want(t, 0, []string{
		"created: breaker.minimumRequests: - → 50",
		"breaker.minimumRequests: 50 → 60; breaker.window: - → 5s; retry.maxAttempts: - → 2",
		"written, no field changed",
		"deleted: breaker.minimumRequests: 60 → -; breaker.window: 5s → -; retry.maxAttempts: 2 → -",
	}, nil)
	r = ctl(t, c, nil, "audit", "--dependency", "shipping", "-o", "json")
	var out struct {
		Entries []auditDoc `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Entries) != 4 {
		t.Fatalf("audit -o json: %v: %s", err, r.stdout)
	}
	if ch := out.Entries[2].Changes; len(ch) != 3 || ch[0] != (changeDoc{Field: "breaker.minimumRequests", From: "50", To: "60"}) ||
		ch[1] != (changeDoc{Field: "breaker.window", From: "-", To: `"5s"`}) {
		t.Errorf("the update's changes = %+v", ch)
	}
}

// TestUsageErrorsNameTheArgument: a missing or extra argument is named,
// with the command's usage (cobra said "accepts 1 arg(s), received 0").
func TestUsageErrorsNameTheArgument(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dep", "show"}, "fuseboxctl: dep show: missing argument NAME, the dependency (usage: fuseboxctl dep show NAME"},
		{[]string{"dep", "show", "a", "b"}, `fuseboxctl: dep show: unexpected argument "b": it takes only NAME`},
		{[]string{"force-open"}, "fuseboxctl: force-open: missing argument NAME, the dependency"},
		{[]string{"policy", "rm"}, "fuseboxctl: policy rm: missing argument NAME, the dependency or _default"},
		{[]string{"policy", "get", "a", "b", "c"}, `unexpected argument "b" "c": it takes only NAME`},
		{[]string{"status", "now"}, `fuseboxctl: status: unexpected argument "now": it takes no argument (usage: fuseboxctl status`},
		{[]string{"policy", "lint", "a.json", "b.json"}, `unexpected argument "b.json": it takes only FILE`},
	} {
		ctl(t, nil, nil, tc.args...).want(t, 1, nil, []string{tc.want})
	}
}

// TestWithAnOlderCoordinator: against a coordinator of the release before
// (no GetEffectivePolicy, no AuditEntry.changes), the new commands say so,
// and audit computes the field changes itself.
func TestWithAnOlderCoordinator(t *testing.T) {
	err := rpcError(status.Error(codes.Unimplemented, "unknown method GetEffectivePolicy for service fusebox.v1.Admin"), "c:7960", true)
	var ce *cliError
	if !errors.As(err, &ce) || ce.code != exitError || !strings.Contains(ce.Error(), "coordinator c:7960 does not serve this") ||
		!strings.Contains(ce.Error(), "older than this fuseboxctl") {
		t.Errorf("Unimplemented = %v", err)
	}
	d := auditOf(&fuseboxv1.AuditEntry{Action: "policy.put", Before: []byte(`{"breaker":{"minimumRequests":20}}`),
		After: []byte(`{"breaker":{"minimumRequests":50}}`)})
	if got := changeSummary(d); got != "breaker.minimumRequests: 20 → 50" {
		t.Errorf("an entry without changes shows %q", got)
	}
}
