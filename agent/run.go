package agent

import (
	"context"
	"errors"
)

// ErrNotBuilt is returned by Run until the daemon lands (the agent issue).
var ErrNotBuilt = errors.New("agent: the daemon runtime is not built yet: this build only validates its configuration")

// Run runs the agent until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return ErrNotBuilt
}
