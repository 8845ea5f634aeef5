package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	lg := New("json", "warn", &buf)
	lg.Info("hidden")
	lg.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["level"] != "WARN" {
		t.Fatalf("json at warn wrote %q (%v)", buf.String(), err)
	}
	buf.Reset()
	New("text", "debug", &buf).Debug("detail")
	if !strings.Contains(buf.String(), "level=DEBUG msg=detail") {
		t.Fatalf("text at debug wrote %q", buf.String())
	}
}

func TestViolations(t *testing.T) {
	for _, f := range Formats {
		for _, l := range Levels {
			if v := Violations(f, l); len(v) != 0 {
				t.Errorf("Violations(%q, %q) = %v", f, l, v)
			}
		}
	}
	v := Violations("xml", "loud")
	if len(v) != 2 || !strings.HasPrefix(v[0], `log-format: must be "text" or "json", got "xml"`) ||
		!strings.HasPrefix(v[1], `log-level: must be debug, info, warn or error, got "loud"`) {
		t.Fatalf("Violations = %q", v)
	}
}
