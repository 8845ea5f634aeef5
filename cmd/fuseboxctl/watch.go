package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
)

// Reconnection backoff of watch after a dropped stream.
const (
	watchMinBackoff = 100 * time.Millisecond
	watchMaxBackoff = 2 * time.Second
)

type watchOptions struct {
	*globalOptions
	interval   time.Duration // deprecated: watch streams, it no longer polls
	dependency string
	count      int
}

func newWatchCommand(g *globalOptions) *cobra.Command {
	o := &watchOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "watch [--dependency NAME] [--count N]",
		Short: "Print breaker transitions, override and policy changes as they happen",
		Long: `watch streams the coordinator's events (the Admin API's Watch, the events
of /api/v1/events) and prints one line per breaker transition (state or
generation change, half-open included), per override set, replaced or
cleared, and per policy written or deleted, until interrupted (or after
--count events). With -o json it prints one JSON object per line, with the
fields of /api/v1/events: id, type, at, dependency, zone, state, previous,
generation, origin, reason, actor, expires, revision (empty ones left out);
with -o yaml one document per event.

When the stream drops (the connection broke, the coordinator restarted, or
watch read too slowly), watch reconnects and resumes after the last event
it printed: nothing missed, nothing printed twice. When the coordinator no
longer has the events it missed (it keeps its last 512, and a restarted one
has none of its predecessor's), watch says so on stderr and goes on with
new events. A coordinator unreachable at the start, or for --timeout after
a drop, is exit 4.`,
		Args: noArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("interval") {
				// Not MarkDeprecated: cobra would print the note on stdout,
				// in the middle of -o json.
				fmt.Fprintln(o.stderr, "fuseboxctl: --interval is deprecated and has no effect: watch streams events, it no longer polls")
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "ignored: watch streams events")
	_ = cmd.Flags().MarkHidden("interval")
	cmd.Flags().StringVar(&o.dependency, "dependency", "", "only this dependency (\"_default\": the fleet default policy)")
	cmd.Flags().IntVar(&o.count, "count", 0, "exit after this many events (0: never)")
	_ = cmd.RegisterFlagCompletionFunc("dependency", completeDependencies(g))
	return cmd
}

// eventDoc is one event as watch prints it: the JSON of /api/v1/events.
type eventDoc = convert.Event

func eventOf(e *fuseboxv1.WatchEvent) eventDoc { return convert.EventFromProto(e) }

// watchState is what survives a dropped stream.
type watchState struct {
	after   uint64 // the ID of the last event printed (0: none yet)
	printed int
	streams int // streams the coordinator subscribed
}

// errWatchDone ends the stream once --count events are printed.
var errWatchDone = errors.New("watch: --count reached")

func (o *watchOptions) run(ctx context.Context) error {
	if o.count < 0 {
		return usageError{fmt.Errorf("--count %d: must be 0 (never stop) or more", o.count)}
	}
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	var (
		st           watchState
		failingSince time.Time
		retry        = backoff.New(backoff.Policy{Base: watchMinBackoff, Max: watchMaxBackoff, Jitter: backoff.None}, nil)
	)
	for {
		streamsBefore := st.streams
		err := o.stream(ctx, c, &st)
		if errors.Is(err, errWatchDone) || ctx.Err() != nil {
			return nil
		}
		if st.streams > streamsBefore { // it was up: a drop, not a failed reconnect
			failingSince = time.Time{}
			retry.Reset()
		}
		s, isStatus := status.FromError(err)
		switch {
		case !isStatus: // printing failed (stdout closed)
			return err
		case s.Code() == codes.OutOfRange && st.after > 0:
			fmt.Fprintf(o.stderr, "fuseboxctl: %s\n", s.Message())
			fmt.Fprintf(o.stderr, "fuseboxctl: events after %d may have been missed; watching new events\n", st.after)
			st.after = 0
			continue
		case st.streams == 0, !retryable(s.Code()):
			return rpcError(err, c.addr, c.ready())
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
			fmt.Fprintf(o.stderr, "fuseboxctl: watch stream from %s dropped (%s: %s); resuming after event %d\n",
				c.addr, s.Code(), s.Message(), st.after)
		} else if time.Since(failingSince) >= o.timeout {
			return rpcError(err, c.addr, c.ready())
		}
		if !ctxtime.Sleep(ctx, retry.Next()) {
			return nil
		}
	}
}

// retryable reports whether a dropped or refused stream is worth opening
// again: a broken connection, a coordinator restarting, a watcher that fell
// behind. Anything else (credentials, a bad name) would fail again.
func retryable(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Internal:
		return true
	}
	return false
}

// stream runs one Watch stream from st.after, printing its events, until
// it fails (a status error), ctx ends, or --count is reached
// (errWatchDone).
func (o *watchOptions) stream(ctx context.Context, c *adminClient, st *watchState) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.admin.Watch(ctx, &fuseboxv1.WatchRequest{Dependency: o.dependency, AfterId: st.after})
	if err != nil {
		return err
	}
	// The coordinator sends the headers once it has subscribed the stream:
	// bound that wait by --timeout like any call.
	timedOut := make(chan struct{})
	t := time.AfterFunc(o.timeout, func() { close(timedOut); cancel() })
	md, err := s.Header()
	if !t.Stop() {
		<-timedOut
		return status.Errorf(codes.DeadlineExceeded, "no answer within --timeout %v", o.timeout)
	}
	if err == nil && md == nil { // the stream failed before its headers: Recv has the error
		_, err = s.Recv()
		if err == nil || errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the stream ended before it started")
		}
	}
	if err != nil {
		return err
	}
	st.streams++
	if st.streams == 1 {
		fmt.Fprintf(o.stderr, "fuseboxctl: watching %s (Ctrl-C to stop)\n", c.addr)
	} else if st.after > 0 {
		fmt.Fprintf(o.stderr, "fuseboxctl: watching %s again, after event %d\n", c.addr, st.after)
	} else {
		fmt.Fprintf(o.stderr, "fuseboxctl: watching %s again\n", c.addr)
	}
	for {
		e, err := s.Recv()
		if errors.Is(err, io.EOF) { // the coordinator never ends a stream with OK
			err = status.Error(codes.Unavailable, "the stream ended")
		}
		if err != nil {
			return err
		}
		if err := o.print(eventOf(e)); err != nil {
			return err
		}
		st.after = e.GetId()
		st.printed++
		if o.count > 0 && st.printed >= o.count {
			return errWatchDone
		}
	}
}

func (o *watchOptions) print(e eventDoc) error {
	switch o.output {
	case formatTable:
		_, err := fmt.Fprintln(o.stdout, eventLine(e))
		return err
	case formatYAML:
		fmt.Fprint(o.stdout, "---\n") // a document per event
	}
	b, err := json.Marshal(e) // JSON: a line per event
	if err != nil {
		return err
	}
	return writeDocument(o.stdout, o.output, b)
}

// eventLine is an event as one line of the table output, e.g.
//
//	2025-01-02T15:04:05Z  transition  shipping-api  closed -> open  generation 4  by web-1  "failure rate 75%"
//	2025-01-02T15:04:07Z  override    shipping-api  forced-closed  until 2025-01-02T16:04:07Z  by alice (ops-admin)  "noisy"
//	2025-01-02T15:04:09Z  policy      shipping-api  put  revision 42
//
// Every string of the event is escaped (safeText): the coordinator relays
// what agents and operators wrote.
func eventLine(e eventDoc) string {
	e.Dependency, e.Zone, e.State, e.Previous = safeText(e.Dependency), safeText(e.Zone), safeText(e.State), safeText(e.Previous)
	e.Origin, e.Actor = safeText(e.Origin), safeText(e.Actor)
	dep := e.Dependency
	if e.Zone != "" {
		dep += " (zone " + e.Zone + ")"
	}
	parts := []string{e.At.UTC().Format(time.RFC3339), fmt.Sprintf("%-10s", e.Type), dep}
	switch e.Type {
	case "transition":
		parts = append(parts, dash(e.Previous)+" -> "+e.State)
		if e.Generation > 0 {
			parts = append(parts, fmt.Sprintf("generation %d", e.Generation))
		}
		if e.Origin != "" {
			parts = append(parts, "by "+e.Origin)
		}
	case "override":
		if e.State == "none" {
			parts = append(parts, "cleared")
		} else {
			parts = append(parts, e.State)
		}
		if e.Expires != nil {
			parts = append(parts, "until "+e.Expires.UTC().Format(time.RFC3339))
		}
		if e.Actor != "" {
			parts = append(parts, "by "+e.Actor)
		}
	default:
		parts = append(parts, e.State)
		if e.Revision > 0 {
			parts = append(parts, fmt.Sprintf("revision %d", e.Revision))
		}
	}
	if e.Reason != "" {
		parts = append(parts, fmt.Sprintf("%q", e.Reason))
	}
	return strings.Join(parts, "  ")
}
