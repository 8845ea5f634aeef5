package coordinator

import (
	"context"
	"errors"
)

// ErrNotBuilt is returned by Run until the control plane lands (the
// control-plane issue).
var ErrNotBuilt = errors.New("coordinator: the control plane is not built yet: this build only validates its configuration")

// Run runs the coordinator until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return ErrNotBuilt
}
