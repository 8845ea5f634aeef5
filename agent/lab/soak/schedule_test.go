package soak

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func testPlan(seed int64) Plan {
	return Plan{Seed: seed, Agents: 8, Sentinels: 2, EtcdMembers: 3, Start: time.Minute, End: 29 * time.Minute}
}

func TestScheduleIsReproducibleFromItsSeed(t *testing.T) {
	a, err := NewSchedule(testPlan(42))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSchedule(testPlan(42))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two schedules of seed 42 differ")
	}
	if a.Table() != b.Table() {
		t.Fatal("two tables of seed 42 differ")
	}
	c, _ := NewSchedule(testPlan(43))
	if reflect.DeepEqual(a.Faults, c.Faults) {
		t.Fatal("seeds 42 and 43 drew the same faults")
	}
}

// Changing one kind's gap moves only that kind's faults: each kind draws
// from its own stream.
func TestScheduleKindsDrawIndependently(t *testing.T) {
	p := testPlan(7)
	a, _ := NewSchedule(p)
	p.Gaps = map[Kind]time.Duration{Loss: 10 * time.Second}
	b, _ := NewSchedule(p)
	of := func(s Schedule, k Kind) []Fault {
		var out []Fault
		for _, f := range s.Faults {
			if f.Kind == k {
				out = append(out, f)
			}
		}
		return out
	}
	for _, k := range Kinds {
		same := reflect.DeepEqual(of(a, k), of(b, k))
		if k == Loss && same {
			t.Errorf("a shorter loss gap left the loss faults unchanged")
		}
		if k != Loss && !same {
			t.Errorf("a shorter loss gap changed the %s faults", k)
		}
	}
}

// The schedule's promises, over many seeds: every kind occurs in a
// 28-minute window, faults of one kind never overlap (so never more than
// one etcd member is down), everything happens in [Start, End), sentinels
// are never killed, partitions have two non-empty sides covering every
// agent once, loss targets are distinct, writes are in time order and
// consecutive policy writes differ.
func TestScheduleKeepsItsPromises(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		p := testPlan(seed)
		s, err := NewSchedule(p)
		if err != nil {
			t.Fatal(err)
		}
		last := map[Kind]time.Duration{}
		for _, k := range Kinds {
			if s.Count(k) == 0 {
				t.Errorf("seed %d: no %s in 28 minutes", seed, k)
			}
		}
		for i, f := range s.Faults {
			if i > 0 && f.At < s.Faults[i-1].At {
				t.Errorf("seed %d: faults out of order at %d", seed, i)
			}
			if f.At < p.Start || f.End() >= p.End || f.For <= 0 {
				t.Errorf("seed %d: %s at %v for %v outside [%v, %v)", seed, f.Kind, f.At, f.For, p.Start, p.End)
			}
			if end, ok := last[f.Kind]; ok && f.At < end+minGap {
				t.Errorf("seed %d: %s at %v overlaps the previous one (ended %v)", seed, f.Kind, f.At, end)
			}
			last[f.Kind] = f.End()
			switch f.Kind {
			case AgentKill:
				if f.Agent < p.Sentinels || f.Agent >= p.Agents {
					t.Errorf("seed %d: kills agent %d (sentinels 0..%d)", seed, f.Agent, p.Sentinels-1)
				}
			case EtcdKill:
				if f.Member < 0 || f.Member >= p.EtcdMembers {
					t.Errorf("seed %d: kills etcd member %d", seed, f.Member)
				}
			case Partition:
				all := append(slices.Clone(f.SideA), f.SideB...)
				slices.Sort(all)
				if len(f.SideA) == 0 || len(f.SideB) == 0 || !slices.Equal(all, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
					t.Errorf("seed %d: partition %v | %v", seed, f.SideA, f.SideB)
				}
				if f.Infra != InfraA && f.Infra != InfraB && f.Infra != InfraBoth {
					t.Errorf("seed %d: partition infra %q", seed, f.Infra)
				}
			case Loss:
				if len(f.Nodes) == 0 || !slices.Contains(lossPercents, f.Percent) {
					t.Errorf("seed %d: loss %d%% at %v", seed, f.Percent, f.Nodes)
				}
				seen := map[Node]bool{}
				for _, n := range f.Nodes {
					if seen[n] {
						t.Errorf("seed %d: loss names %v twice", seed, n)
					}
					seen[n] = true
				}
			}
		}
		var prevMin uint32
		for i, w := range s.Writes {
			if w.At < p.Start || w.At >= p.End || (i > 0 && w.At < s.Writes[i-1].At) {
				t.Errorf("seed %d: write %d at %v", seed, i, w.At)
			}
			if w.Op == WritePolicy {
				if w.MinimumRequests == prevMin {
					t.Errorf("seed %d: write %d repeats minimumRequests %d", seed, i, w.MinimumRequests)
				}
				prevMin = w.MinimumRequests
			}
			if (w.Op == WriteForceOpen || w.Op == WriteForceClosed) && w.Reason == "" {
				t.Errorf("seed %d: write %d has no reason", seed, i)
			}
		}
		if len(s.Writes) < 60 {
			t.Errorf("seed %d: only %d writes in 28 minutes", seed, len(s.Writes))
		}
	}
}

func TestPlanValidateNamesEveryProblem(t *testing.T) {
	err := Plan{Agents: 2, Sentinels: 3, EtcdMembers: 1, Start: time.Minute, End: time.Second,
		Gaps: map[Kind]time.Duration{"meteor": time.Second, Loss: 0}}.Validate()
	if err == nil {
		t.Fatal("a bad plan was accepted")
	}
	for _, want := range []string{"at least 4 agents", "sentinels", "3 etcd members", "start < end", `unknown fault kind "meteor"`, "gap of loss"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := NewSchedule(Plan{}); err == nil {
		t.Error("NewSchedule accepted an empty plan")
	}
}
