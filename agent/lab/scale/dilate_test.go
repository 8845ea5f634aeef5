package scale

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/simnet"
)

// Every time.Duration of agent.Config is dilated: by DilateAgent, or by
// the engine's clock. A new timing field fails here until it is put in one
// of the two lists (agentTimings or engineTimings).
func TestEveryTimingIsDilated(t *testing.T) {
	var c agent.Config
	listed := map[uintptr]bool{}
	for _, p := range agentTimings(&c) {
		listed[reflect.ValueOf(p).Pointer()] = true
	}
	v := reflect.ValueOf(&c).Elem()
	durType := reflect.TypeOf(time.Duration(0))
	seen := 0
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type != durType || !f.IsExported() {
			continue
		}
		seen++
		inAgent := listed[v.Field(i).Addr().Pointer()]
		inEngine := slices.Contains(engineTimings, f.Name)
		switch {
		case inAgent && inEngine:
			t.Errorf("agent.Config.%s is dilated twice: by DilateAgent and by the engine's clock", f.Name)
		case !inAgent && !inEngine:
			t.Errorf("agent.Config.%s is not dilated: add it to agentTimings (real time) or engineTimings (the engine's clock)", f.Name)
		}
	}
	if seen != len(agentTimings(&c))+len(engineTimings) {
		t.Errorf("%d time.Duration fields, %d listed", seen, len(agentTimings(&c))+len(engineTimings))
	}

	d := agent.DefaultConfig()
	DilateAgent(&d, 4)
	def := agent.DefaultConfig()
	want, got := agentTimings(&def), agentTimings(&d)
	for i := range want {
		if *got[i] != 4**want[i] {
			t.Errorf("timing %d: dilated %v, want 4 × %v", i, *got[i], *want[i])
		}
	}
	if d.ProposerDelay != def.ProposerDelay {
		t.Errorf("ProposerDelay dilated to %v: the engine's clock dilates it", d.ProposerDelay)
	}
	if l := DilateLink(LossyLink, 4); l.Latency != 80*time.Millisecond || l.Jitter != 120*time.Millisecond || l.Loss != LossyLink.Loss {
		t.Errorf("DilateLink(LossyLink, 4) = %+v", l)
	}
}

// The dilated clock advances 1/K second per second, monotonically.
func TestClockRunsSlow(t *testing.T) {
	c := NewClock(100)
	real0, t0 := time.Now(), c.Now()
	time.Sleep(50 * time.Millisecond) // the clock under test is real time: nothing to wait for but time itself
	elapsed, dt := time.Since(real0), c.Now().Sub(t0)
	if dt <= 0 || dt > elapsed/50 {
		t.Errorf("after %v the clock moved %v, want about %v", elapsed, dt, elapsed/100)
	}
	if m1, m2 := c.Monotonic(), c.Monotonic(); m2 < m1 {
		t.Errorf("Monotonic went back: %v then %v", m1, m2)
	}
}

func TestParseDilations(t *testing.T) {
	ds, err := ParseDilations("1, 4, 500:8")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Dilate: ds}
	if got := cfg.dilations(50); !slices.Equal(got, []float64{1, 4}) {
		t.Errorf("N=50 runs at %v, want [1 4]", got)
	}
	if got := cfg.dilations(500); !slices.Equal(got, []float64{8}) {
		t.Errorf("N=500 runs at %v, want [8]", got)
	}
	if got := (RunConfig{}).dilations(10); !slices.Equal(got, []float64{1}) {
		t.Errorf("no -dilate: %v, want [1]", got)
	}
	for _, bad := range []string{"0.5", "x", "0:2", "200:", "2000"} {
		if _, err := ParseDilations(bad); err == nil {
			t.Errorf("ParseDilations(%q) accepted", bad)
		}
	}
	if err := (FleetConfig{N: 1, Dir: "d", Dilate: 0.5, Net: simnet.Config{}}).Validate(); err == nil {
		t.Error("Dilate 0.5 accepted")
	}
}
