package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// inject runs one fault: starts it, waits its length, ends it.
func (r *soakRun) inject(ctx context.Context, t0 time.Time, f Fault) {
	lab := r.lab
	allAgents := make([]string, r.cfg.Agents)
	for i := range allAgents {
		allAgents[i] = Node{RoleAgent, i}.String()
	}
	if r.cfg.Verbose {
		r.logf("fault: %s", f.Describe())
	}
	started := time.Now()
	wait := func() { ctxtime.Sleep(ctx, time.Until(t0.Add(f.End()))) }
	defer func() { r.m.injected(f.Kind, time.Since(started)) }()
	switch f.Kind {
	case AgentKill:
		p := r.agents[f.Agent]
		id := r.m.begin(PathMembership, []string{Fleet}, started)
		r.m.agentDown(p.Name())
		p.Stop(syscall.SIGKILL, processStopWait)
		wait()
		if err := p.Start(); err != nil {
			r.m.trouble(time.Now(), "restart %s: %v", p.Name(), err)
		} else {
			_, inc, at := p.Running()
			r.m.agentUp(p.Name(), inc, at)
		}
		r.m.end(id, time.Now())
	case EtcdKill:
		p := r.etcd[f.Member]
		p.Stop(syscall.SIGKILL, processStopWait)
		r.m.window(PathEtcd, allAgents, started, started.Add(min(f.For, EtcdFailover)))
		r.m.window(PathControl, []string{Control}, started, started.Add(min(f.For, ElectionBound)))
		wait()
		if err := p.Start(); err != nil {
			r.m.trouble(time.Now(), "restart %s: %v", p.Name(), err)
		}
	case CoordinatorRestart:
		id := r.m.begin(PathControl, []string{Control}, started)
		sig := syscall.SIGTERM
		if f.Kill {
			sig = syscall.SIGKILL
		}
		r.coordinator.Stop(sig, processStopWait)
		wait()
		if err := r.coordinator.Start(); err != nil {
			r.m.trouble(time.Now(), "restart the coordinator: %v", err)
		}
		r.m.end(id, time.Now())
	case Partition:
		var a, b []Node
		var cutFromEtcd []string
		for _, i := range f.SideA {
			a = append(a, Node{RoleAgent, i})
		}
		for _, i := range f.SideB {
			b = append(b, Node{RoleAgent, i})
		}
		var infra []Node
		for i := range etcdMembers {
			infra = append(infra, Node{RoleEtcd, i})
		}
		infra = append(infra, Node{Role: RoleCoordinator})
		switch f.Infra {
		case InfraA:
			for _, n := range b {
				cutFromEtcd = append(cutFromEtcd, n.String())
			}
			a = append(a, infra...)
		case InfraB:
			for _, n := range a {
				cutFromEtcd = append(cutFromEtcd, n.String())
			}
			b = append(b, infra...)
		}
		ids := []int{r.m.begin(PathGossip, allAgents, started), r.m.begin(PathMembership, []string{Fleet}, started),
			r.m.begin(PathEtcd, cutFromEtcd, started)}
		if err := lab.Partition(a, b); err != nil {
			r.m.trouble(time.Now(), "partition: %v", err)
		}
		wait()
		if err := lab.Heal(append(a, b...)); err != nil {
			r.m.trouble(time.Now(), "heal: %v", err)
		}
		for _, id := range ids {
			r.m.end(id, time.Now())
		}
	case Loss:
		var lossAgents []string
		etcdOrCoord, etcdHit := false, false
		for _, n := range f.Nodes {
			switch n.Role {
			case RoleAgent:
				lossAgents = append(lossAgents, n.String())
			case RoleEtcd:
				etcdOrCoord, etcdHit = true, true
			case RoleCoordinator:
				etcdOrCoord = true
			}
		}
		ids := []int{r.m.begin(PathGossip, lossAgents, started)}
		if len(lossAgents) > 0 {
			ids = append(ids, r.m.begin(PathMembership, []string{Fleet}, started))
		}
		if etcdHit {
			ids = append(ids, r.m.begin(PathEtcd, allAgents, started))
		} else {
			ids = append(ids, r.m.begin(PathEtcd, lossAgents, started))
		}
		if etcdOrCoord {
			ids = append(ids, r.m.begin(PathControl, []string{Control}, started))
		}
		if err := lab.Loss(f.Nodes, f.Percent); err != nil {
			r.m.trouble(time.Now(), "loss: %v", err)
		}
		wait()
		if err := lab.LossEnd(f.Nodes); err != nil {
			r.m.trouble(time.Now(), "loss end: %v", err)
		}
		for _, id := range ids {
			r.m.end(id, time.Now())
		}
	}
}

// writer makes the schedule's writes with fuseboxctl, one after another.
func (r *soakRun) writer(ctx context.Context, t0 time.Time) {
	for _, w := range r.sched.Writes {
		if !ctxtime.Sleep(ctx, time.Until(t0.Add(w.At))) {
			return
		}
		args := []string{"--coordinator", r.coordAddr(coordGRPCPort), "--token-file", r.cfg.TokenFile,
			"--insecure-plaintext-token", "--actor", "soak", "--timeout", "10s", "-o", "json"}
		var stdin string
		switch w.Op {
		case WritePolicy:
			args = append(args, "policy", "set", DepOps, "-f", "-", "--yes")
			stdin = fmt.Sprintf(`{"breaker": {"minimumRequests": %d}}`, w.MinimumRequests)
		case WriteForceOpen, WriteForceClosed:
			args = append(args, string(w.Op), DepOps, "--reason", w.Reason)
			if w.TTL > 0 {
				args = append(args, "--ttl", w.TTL.String())
			}
		case WriteClear:
			args = append(args, "clear", DepOps)
		}
		r.m.writeStarts(time.Now())
		r.write(ctx, w, args, stdin)
		r.m.writeEnds()
	}
}

// write runs one fuseboxctl write and checks its outcome.
func (r *soakRun) write(ctx context.Context, w Write, args []string, stdin string) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cmd := exec.CommandContext(cctx, filepath.Join(r.cfg.Bin, "fuseboxctl"), args...)
	cmd.Env = fleet.Env()
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	cancel()
	if ctx.Err() != nil {
		return
	}
	acked := time.Now()
	exit := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		r.m.trouble(acked, "fuseboxctl: %v", err)
		return
	}
	if r.cfg.Verbose {
		r.logf("write: %s: exit %d", w.Describe(), exit)
	}
	if exit != 0 {
		r.m.writeDone(acked, w, exit, strings.TrimSpace(out.String()), nil)
		return
	}
	// What etcd holds right after the acknowledgement.
	var inEtcd *Desired
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	for {
		d, err := readDesired(rctx, r.st, time.Now())
		if err == nil {
			if w.TTL == 0 || time.Since(acked) < w.TTL-2*time.Second {
				inEtcd = &d
			}
			r.m.expect(acked, d)
			break
		}
		if !ctxtime.Sleep(rctx, 250*time.Millisecond) {
			break
		}
	}
	rcancel()
	r.m.writeDone(acked, w, 0, "", inEtcd)
}
