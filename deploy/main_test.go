// Package deploy_test checks the files under deploy/ against the code they
// deploy, without a cluster, a Docker daemon or root:
//
//   - every kustomization (overlays and examples) renders through
//     kustomize's Go API and every object decodes strictly into its
//     k8s.io/api type (kubernetes_test.go);
//   - every flag a manifest, a systemd unit or an example configuration
//     passes to a Fusebox binary exists in that binary's flag set and
//     validates, and every port matches the binary's defaults and flags
//     (flags_test.go);
//   - the systemd units pass `systemd-analyze verify` where it exists
//     (systemd_test.go);
//   - the Dockerfile builds with go.mod's Go version and stamps variables
//     that exist (docker_test.go).
//
// The package has only test files: kustomize and k8s.io/api are test-only
// dependencies, and TestBinariesLinkNoManifestLibraries checks that no
// binary links them.
package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository root (the root module's folder), seen from
// this package's directory.
const repoRoot = ".."

// readFile returns the contents of a file of the repository.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBinariesLinkNoManifestLibraries checks that kustomize and the
// Kubernetes API types stay test-only dependencies: no binary links them.
func TestBinariesLinkNoManifestLibraries(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./...")
	cmd.Dir = filepath.Join(repoRoot, "cmd")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./... in cmd/: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"sigs.k8s.io/kustomize/", "k8s.io/api/", "k8s.io/apimachinery/"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("a binary under cmd/ links %s: kustomize and k8s.io/api are for deploy/'s tests only", pkg)
			}
		}
	}
}
