package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

type watchOptions struct {
	*globalOptions
	interval   time.Duration
	dependency string
	count      int
}

func newWatchCommand(g *globalOptions) *cobra.Command {
	o := &watchOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "watch [--dependency NAME] [--interval 1s] [--count N]",
		Short: "Print breaker transitions and override changes as they happen",
		Long: `watch follows the coordinator's fleet view and prints one line per breaker
transition (state or generation change, half-open included) and per override
set, replaced or removed, until interrupted (or after --count events). With
-o json it prints one JSON object per line; with -o yaml one document per
event.

It polls the Admin API every --interval, so a change that is undone within
one interval may go unseen; the coordinator's /api/v1/events stream has
every event.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "how often to ask the coordinator")
	cmd.Flags().StringVar(&o.dependency, "dependency", "", "only this dependency")
	cmd.Flags().IntVar(&o.count, "count", 0, "exit after this many events (0: never)")
	_ = cmd.RegisterFlagCompletionFunc("dependency", completeDependencies(g))
	return cmd
}

// watchEvent is one line of watch's output.
type watchEvent struct {
	At         time.Time `json:"at"`
	Type       string    `json:"type"` // transition or override
	Dependency string    `json:"dependency"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Generation uint64    `json:"generation,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

type watchedDep struct {
	state, override, overrideReason string
	generation                      uint64
}

func (o *watchOptions) run(ctx context.Context) error {
	if o.interval < 10*time.Millisecond {
		return usageError{fmt.Errorf("--interval %v is too short (at least 10ms)", o.interval)}
	}
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	var last map[string]watchedDep
	printed := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		var snap *fuseboxv1.FleetSnapshot
		err := c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
			snap, err = a.GetFleet(ctx, &fuseboxv1.GetFleetRequest{})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cur := make(map[string]watchedDep, len(snap.GetDependencies()))
		for _, d := range snap.GetDependencies() {
			if o.dependency != "" && d.GetDependency() != o.dependency {
				continue
			}
			cur[d.GetDependency()] = watchedDep{state: stateName(d.GetState()), generation: d.GetGeneration(),
				override: overrideName(d.GetOverride()), overrideReason: d.GetOverrideReason()}
		}
		if last == nil {
			fmt.Fprintf(o.stderr, "fuseboxctl: watching %s (Ctrl-C to stop)\n", o.coordinator)
		} else {
			for _, e := range diffFleet(last, cur, snap.GetAt().AsTime().UTC()) {
				if err := o.print(e); err != nil {
					return err
				}
				printed++
				if o.count > 0 && printed >= o.count {
					return nil
				}
			}
		}
		last = cur
		timer.Reset(o.interval)
	}
}

// diffFleet returns the events between two polls, in dependency order.
func diffFleet(prev, cur map[string]watchedDep, at time.Time) []watchEvent {
	var out []watchEvent
	for _, name := range sortedKeys(prev, cur) {
		p, c := prev[name], cur[name]
		if p.state == "" {
			p.state = "closed"
		}
		if c.state == "" {
			c.state = "closed"
		}
		if p.state != c.state || p.generation != c.generation {
			out = append(out, watchEvent{At: at, Type: "transition", Dependency: name, From: p.state, To: c.state, Generation: c.generation})
		}
		if p.override != c.override || p.overrideReason != c.overrideReason {
			out = append(out, watchEvent{At: at, Type: "override", Dependency: name, From: dash(p.override), To: dash(c.override), Reason: c.overrideReason})
		}
	}
	return out
}

func sortedKeys(a, b map[string]watchedDep) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]watchedDep{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func (o *watchOptions) print(e watchEvent) error {
	switch o.output {
	case formatJSON:
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.stdout, "%s\n", b)
		return err
	case formatYAML:
		b, err := yaml.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.stdout, "---\n%s", b)
		return err
	}
	line := fmt.Sprintf("%s  %-10s  %s  %s -> %s", e.At.Format(time.RFC3339), e.Type, e.Dependency, e.From, e.To)
	if e.Generation > 0 {
		line += fmt.Sprintf("  generation %d", e.Generation)
	}
	if e.Reason != "" {
		line += fmt.Sprintf("  %q", e.Reason)
	}
	_, err := fmt.Fprintln(o.stdout, line)
	return err
}
