package sharedstate

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Policy documents in Markdown: a ```json block, or an inline `{…}` that
// names a section of a policy.
var (
	jsonBlock     = regexp.MustCompile("(?s)```json\n(.*?)```")
	inlinePolicy  = regexp.MustCompile("`(\\{[^`]*\\})`")
	policySection = regexp.MustCompile(`"(breaker|retry|throttle|concurrency)"\s*:`)
)

// TestExamplePoliciesInTheRepo: every policy document the repository shows
// its users — a .json file shaped like a policy, a JSON block or an inline
// policy in any Markdown file — is valid as a write checks it (a document
// naming _default as a complete fleet default, any other over the built-in
// default), so that no example teaches what Fusebox refuses, and a change
// of how documents are read that would refuse one fails here.
func TestExamplePoliciesInTheRepo(t *testing.T) {
	root := ".." // the repository: this package is at its top
	var docs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		switch filepath.Ext(path) {
		case ".json":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if isPolicyShaped(data) {
				docs = append(docs, path)
				checkExample(t, path, data)
			}
		case ".md":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range jsonBlock.FindAllSubmatch(data, -1) {
				docs = append(docs, path)
				checkExample(t, path, m[1])
			}
			for _, m := range inlinePolicy.FindAllSubmatch(data, -1) {
				if policySection.Match(m[1]) {
					docs = append(docs, path)
					checkExample(t, path, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// sharedstate/DESIGN.md's default, clientlib/README.md's shaping
	// sections, coordinator/README.md's proposed policy at least.
	t.Logf("%d example policies in %v", len(docs), docs)
	if len(docs) < 3 {
		t.Fatalf("found %d example policies (%v): the walk misses them", len(docs), docs)
	}
}

// isPolicyShaped reports whether data is a JSON object whose members are
// all top-level members of a policy, one of them a section.
func isPolicyShaped(data []byte) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return false
	}
	section := false
	for k := range obj {
		f, ok := policyIndex[k]
		if !ok {
			return false
		}
		section = section || f.section
	}
	return section
}

func checkExample(t *testing.T, path string, doc []byte) {
	t.Helper()
	if vs, _ := CheckPolicyDocument(doc, DefaultPolicy(), 0); len(vs) > 0 {
		t.Errorf("%s: the example policy\n%s\nis refused: %v", path, doc, vs)
	}
}
