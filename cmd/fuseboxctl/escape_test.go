package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

func TestSafeTextAndSafeWriter(t *testing.T) {
	for _, tc := range []struct{ in, text, stream string }{
		{"plain café", "plain café", "plain café"},
		{"bob\x1b[2J\x1b[31mEVIL\r", `bob\x1b[2J\x1b[31mEVIL\x0d`, `bob\x1b[2J\x1b[31mEVIL\x0d`},
		{"two\nlines\tand a tab", `two\x0alines\x09and a tab`, "two\nlines\tand a tab"},
		{"c1 \u009b31m del \x7f", `c1 \u009b31m del \u007f`, `c1 \u009b31m del \u007f`},
		{"bidi \u202eevil", `bidi \u202eevil`, "bidi \u202eevil"},
		{"bad \xff\xfe byte", `bad \xff\xfe byte`, `bad \xff\xfe byte`},
	} {
		if got := safeText(tc.in); got != tc.text {
			t.Errorf("safeText(%q) = %q, want %q", tc.in, got, tc.text)
		}
		var b bytes.Buffer
		if n, err := newSafeWriter(&b).Write([]byte(tc.in)); err != nil || n != len(tc.in) {
			t.Errorf("safeWriter.Write(%q) = %d, %v", tc.in, n, err)
		}
		if b.String() != tc.stream {
			t.Errorf("safeWriter wrote %q for %q, want %q", b.String(), tc.in, tc.stream)
		}
	}
	// JSON stays JSON, and the same string.
	doc, _ := json.Marshal(map[string]string{"reason": "x\u009by\x7f"})
	var b bytes.Buffer
	_, _ = newSafeWriter(&b).Write(doc)
	var back map[string]string
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back["reason"] != "x\u009by\x7f" || bytes.ContainsAny(b.Bytes(), "\u009b\x7f") {
		t.Errorf("JSON through safeWriter: %q, %v", b.String(), err)
	}
}

// TestServerStringsAreEscaped: an override's actor and reason holding
// terminal escapes (clear the screen, recolour, return to the line's
// start) reach no command's output raw, in any format: the escapes are
// shown, not obeyed. Today's coordinator refuses such text
// (TestControlCharactersAreRefused in coordinator), so the override is
// written to etcd directly, as an older coordinator or any writer with
// etcd access could have stored it.
func TestServerStringsAreEscaped(t *testing.T) {
	c := startCoordinator(t, false)
	const actor, reason = "bob\x1b[2J\x1b[31mEVIL\r", "drill\u009b31m\nsecond line\x07"
	env := []string{"FUSEBOX_COORDINATOR=" + c.GRPCAddr()}
	cmd, stdout, _ := startWatch(t, env, "--count", "1")
	jsonCmd, jsonOut, _ := startWatch(t, env, "--count", "1", "-o", "json")
	yamlCmd, yamlOut, _ := startWatch(t, env, "--count", "1", "-o", "yaml")
	if _, err := c.Store().SetOverride(context.Background(), "payments", store.OverrideSpec{State: sharedstate.ForcedOpen, Reason: reason,
		TTL: time.Hour}, store.WriteOptions{Actor: actor}); err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{"watch": string(waitOutput(t, cmd, stdout)), "watch -o json": string(waitOutput(t, jsonCmd, jsonOut)),
		"watch -o yaml": string(waitOutput(t, yamlCmd, yamlOut))}
	deadline := time.Now().Add(10 * time.Second)
	for { // the fleet view follows etcd's watch
		r := ctl(t, c, nil, "dep", "show", "payments")
		if strings.Contains(r.stdout, "forced-open") || time.Now().After(deadline) {
			break
		}
	}
	for _, args := range [][]string{
		{"audit"}, {"audit", "-o", "json"}, {"audit", "-o", "yaml"},
		{"dep", "show", "payments"}, {"dep", "show", "payments", "-o", "yaml"},
		{"status"}, {"status", "-o", "json"}, {"deps"},
	} {
		r := ctl(t, c, nil, args...)
		if r.code != 0 {
			t.Fatalf("fuseboxctl %v: %v", args, r)
		}
		outputs[strings.Join(args, " ")] = r.stdout + r.stderr
	}
	for name, out := range outputs {
		if i := strings.IndexAny(out, "\x1b\r\x07\u009b"); i >= 0 {
			t.Errorf("fuseboxctl %s printed a raw control character at %d: %q", name, i, out)
		}
	}
	for _, name := range []string{"watch", "audit", "dep show payments"} {
		if !strings.Contains(outputs[name], `bob\x1b[2J\x1b[31mEVIL`) {
			t.Errorf("fuseboxctl %s does not show the actor escaped: %q", name, outputs[name])
		}
	}
	// In tables and lines, a line break in a reason stays in its line.
	for _, name := range []string{"audit", "dep show payments", "watch"} {
		for _, line := range strings.Split(outputs[name], "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "second line") {
				t.Errorf("fuseboxctl %s: the reason's line break started a line of its own: %q", name, outputs[name])
			}
		}
	}
	// JSON still decodes to the strings the coordinator holds.
	var audit struct {
		Entries []auditDoc `json:"entries"`
	}
	if err := json.Unmarshal([]byte(outputs["audit -o json"]), &audit); err != nil || len(audit.Entries) != 1 ||
		!strings.HasPrefix(audit.Entries[0].Actor, actor) {
		t.Errorf("audit -o json: %v: %+v", err, audit.Entries)
	}
}

func TestJSONSafe(t *testing.T) {
	in := []byte("{\n  \"a\": \"x\u009b\u202e\x7f\xff\"\n}")
	out := jsonSafe(in)
	var v map[string]string
	if err := json.Unmarshal(out, &v); err != nil || v["a"] != "x\u009b\u202e\x7f\ufffd" || !bytes.Contains(out, []byte(`\u009b\u202e\u007f\ufffd`)) {
		t.Errorf("jsonSafe(%q) = %q (%v, %q)", in, out, err, v["a"])
	}
}
