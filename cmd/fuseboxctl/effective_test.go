package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// TestPolicyGetShowsTheEffectivePolicy: policy get NAME answers for a
// dependency on the fleet default (it used to exit 1 "not found") and
// names, for every field, where its value comes from: the dependency's own
// policy, the fleet default or the built-in default.
func TestPolicyGetShowsTheEffectivePolicy(t *testing.T) {
	c := startCoordinator(t, false)
	ctx := context.Background()

	r := ctl(t, c, nil, "policy", "get", "shipping")
	r.want(t, 0, []string{"Dependency:  shipping", "Policy:      none of its own: it runs on the built-in default (no fleet default is stored)",
		"FIELD", "VALUE", "FROM", "WITHOUT IT", "breaker.minimumRequests", "built-in default"}, nil)
	if strings.Contains(r.stdout, "own policy") || strings.Contains(r.stdout, "fleet default  ") {
		t.Errorf("nothing is stored, yet a value comes from elsewhere than the built-in default:\n%s", r.stdout)
	}

	def := sharedstate.DefaultPolicy()
	def.Breaker.MinimumRequests = 30
	e, err := c.Store().PutPolicyOf(ctx, sharedstate.DefaultPolicyName, def, store.WriteOptions{Actor: "setup"})
	if err != nil {
		t.Fatal(err)
	}
	r = ctl(t, c, nil, "policy", "get", "shipping")
	r.want(t, 0, []string{"none of its own: it runs on the fleet default (_default, revision "}, nil)
	if line := grepLines(r.stdout, "breaker.minimumRequests"); !strings.Contains(line, "30") || !strings.Contains(line, "fleet default") ||
		!strings.Contains(line, "20") {
		t.Errorf("breaker.minimumRequests line %q, want 30 from the fleet default, 20 without it", line)
	}

	good := writeFile(t, "good.json", goodPolicy) // minimumRequests 50, retry.maxAttempts 5
	ctl(t, c, nil, "policy", "set", "--yes", "-f", good).want(t, 0, nil, nil)
	r = ctl(t, c, nil, "policy", "get", "shipping")
	r.want(t, 0, []string{"its own, stored at revision", "over the fleet default (_default, revision"}, nil)
	for field, want := range map[string][]string{
		"breaker.minimumRequests": {"50", "own policy", "30"},
		"retry.maxAttempts":       {"5", "own policy"},
		"breaker.window":          {"10s", "fleet default"},
	} {
		line := grepLines(r.stdout, field+" ")
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("line %q lacks %q", line, w)
			}
		}
	}

	r = ctl(t, c, nil, "policy", "get", "shipping", "-o", "json")
	var doc effectiveDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("policy get -o json: %v: %s", err, r.stdout)
	}
	own, err := sharedstate.DecodePolicy(sharedstate.Policy{}, doc.Policy)
	if err != nil || doc.ModRevision == 0 || doc.FleetDefault == nil ||
		doc.FleetDefault.ModRevision != e.ModRevision || own.Breaker.MinimumRequests != 50 || own.Breaker.Window != 0 {
		t.Errorf("policy get -o json = %+v", doc)
	}
	sources := map[string]fieldDoc{}
	for _, f := range doc.Fields {
		sources[f.Field] = f
	}
	if f := sources["breaker.minimumRequests"]; f.Source != "own" || string(f.Value) != "50" || string(f.Inherited) != "30" {
		t.Errorf("breaker.minimumRequests = %+v", f)
	}
	if f := sources["breaker.window"]; f.Source != "fleet-default" || string(f.Value) != `"10s"` {
		t.Errorf("breaker.window = %+v", f)
	}
	ctl(t, c, nil, "policy", "get", "shipping", "-o", "yaml").want(t, 0, []string{"source: own", "fleetDefault:", "effective:"}, nil)
	ctl(t, c, nil, "policy", "get", "_default").want(t, 0, []string{"Policy:      the fleet default, stored at revision", "fleet default"}, nil)
	ctl(t, c, nil, "policy", "get", "bad name!").want(t, 2, nil, []string{"invalid dependency name"})
}

// TestMalformedPolicyNamesLineAndColumn: a policy that is not well-formed
// JSON is refused (exit 2) with the line and column of the problem, by the
// coordinator (policy set) and offline (policy lint) alike.
func TestMalformedPolicyNamesLineAndColumn(t *testing.T) {
	c := startCoordinator(t, false)
	broken := writeFile(t, "broken.json", "{\n  \"dependency\": \"shipping\",\n  \"breaker\": {\n    \"minimumRequests\": 50,\n  }\n}\n")
	want := []string{"line 5, column 3: invalid character '}'"}
	ctl(t, c, nil, "policy", "set", "--yes", "-f", broken).want(t, 2, nil, want)
	ctl(t, c, nil, "policy", "set", "shipping", "-f", broken).want(t, 2, nil, want) // checked before asking
	ctl(t, nil, nil, "policy", "lint", broken).want(t, 2, nil, want)
	ctl(t, c, nil, "policy", "simulate", "--dependency", "shipping", "-f", broken).want(t, 2, nil, want)
}
