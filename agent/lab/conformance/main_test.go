package conformance

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
)

// The binaries TestMain built: fuseboxctl, and the agent for the tests
// that kill one; and the repository's root (the Python client's folder).
var ctlBinary, agentBinary, repoDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fusebox-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if repoDir, err = fleet.ModuleRoot(ctx, ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bins, err := fleet.Build(ctx, dir, false, "fuseboxctl", "fusebox-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctlBinary, agentBinary = bins[0], bins[1]
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
