package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// overrideOptions are the options of force-open and force-closed.
type overrideOptions struct {
	*globalOptions
	ttl    time.Duration
	reason string
}

func (o *overrideOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&o.ttl, "ttl", 0, "remove the override by itself after this long, e.g. 10m (default: until cleared)")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, for the audit and the dashboard")
}

// set calls ForceOpen or ForceClosed.
func (o *overrideOptions) set(ctx context.Context, name string, open bool) error {
	if o.ttl < 0 {
		return usageError{fmt.Errorf("--ttl %v must not be negative", o.ttl)}
	}
	req := &fuseboxv1.SetOverrideRequest{Dependency: name, Reason: o.reason, Actor: o.actor}
	if o.ttl > 0 {
		req.Ttl = durationpb.New(o.ttl)
	}
	c, err := o.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	var e *fuseboxv1.OverrideEntry
	if err := c.call(ctx, func(ctx context.Context, a fuseboxv1.AdminClient) (err error) {
		if open {
			e, err = a.ForceOpen(ctx, req)
		} else {
			e, err = a.ForceClosed(ctx, req)
		}
		return err
	}); err != nil {
		return err
	}
	doc := overrideOf(e)
	if o.output != formatTable {
		return printData(o.stdout, o.output, doc)
	}
	until := "until cleared"
	if doc.Expires != nil {
		until = "until " + doc.Expires.Format(time.RFC3339)
	}
	fmt.Fprintf(o.stdout, "%s %s %s (by %s)\n", name, safeText(doc.State), until, safeText(doc.Actor))
	return nil
}
