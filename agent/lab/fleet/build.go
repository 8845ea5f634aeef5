package fleet

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build builds the binaries of the repository's cmd module (by their
// folder names under cmd/: "fusebox-agent", "fuseboxctl", …) into dir and
// returns their paths, in order. race adds -race (a test under -race, whose
// packages are compiled that way already, pays only the link). The
// repository is the one the lab module is in (ModuleRoot).
func Build(ctx context.Context, dir string, race bool, binaries ...string) ([]string, error) {
	root, err := ModuleRoot(ctx, "")
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	var out []string
	for _, b := range binaries {
		args = append(args, "./"+b)
		out = append(out, filepath.Join(dir, b))
	}
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = filepath.Join(root, "cmd")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("fleet: go %s (in %s): %w\n%s", strings.Join(args, " "), cmd.Dir, err, b)
	}
	return out, nil
}

// goTool is the go command found on PATH ("go" when there is none: the
// build then fails saying so).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// rootModule is the module path of the repository's root module.
const rootModule = "github.com/fusebox-dev/fusebox"

// ModuleRoot returns the repository root, the folder of the Fusebox root
// module, as the module governing dir (the current directory when dir is
// empty) finds it: that module itself, or the replace directive of a
// nested module (the lab's).
func ModuleRoot(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, goTool(), "list", "-m", "-f", "{{.Dir}}", rootModule)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	root := strings.TrimSpace(string(b))
	if err != nil || root == "" {
		return "", fmt.Errorf("fleet: not inside the Fusebox repository (go list -m %s: %v %s): run from the repository", rootModule, err, strings.TrimSpace(stderr.String()))
	}
	return root, nil
}
