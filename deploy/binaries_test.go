package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if built.dir != "" {
			os.RemoveAll(built.dir)
		}
	}))
}

// built holds the Fusebox binaries the tests run (-h, systemd-analyze),
// built once per test process.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// fuseboxBinaries are the binaries the manifests and units start.
var fuseboxBinaries = []string{"fusebox-agent", "fusebox-coordinator", "fusebox-demo"}

// builtBinaries are the ones the tests build and run: the daemons' flags
// are checked in process through agent.LoadConfig and
// coordinator.LoadConfig, which their mains call.
var builtBinaries = []string{"fusebox-demo"}

// binaryPath builds the Fusebox binaries (once) and returns the path of
// name (built in the cmd module). With -race, the build uses -race too:
// `make test` has compiled the packages that way already, so only linking
// is left.
func binaryPath(t *testing.T, name string) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "fusebox-deploy-test-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		for _, b := range builtBinaries {
			args = append(args, "./"+b)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join(repoRoot, "cmd")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("building the binaries: %v", built.err)
	}
	if !slices.Contains(builtBinaries, name) {
		t.Fatalf("%s is not built for the tests (builtBinaries)", name)
	}
	return filepath.Join(built.dir, name)
}
