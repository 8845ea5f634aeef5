package sharedstate

import (
	"os"
	"regexp"
	"testing"
)

// TestDesignPolicyIsTheDefault keeps the fleet default sharedstate/DESIGN.md shows
// under "Policy" equal to DefaultPolicy.
func TestDesignPolicyIsTheDefault(t *testing.T) {
	doc, err := os.ReadFile("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n## Policy\n.*?```json\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("sharedstate/DESIGN.md has no json block under \"## Policy\"")
	}
	p, err := ParsePolicy(m[1])
	if err != nil {
		t.Fatalf("sharedstate/DESIGN.md's policy: %v", err)
	}
	if want := DefaultPolicy(); p != want {
		t.Errorf("sharedstate/DESIGN.md's policy is not DefaultPolicy():\n got %+v\nwant %+v", p, want)
	}
}
