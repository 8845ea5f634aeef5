package conformance

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// modulePath is the root module's path; every package's import path
// starts with it, whichever module holds the package.
const modulePath = "github.com/fusebox-dev/fusebox"

// The binaries TestMain built: fuseboxctl, and the agent for the tests
// that kill one.
var ctlBinary, agentBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fusebox-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := goBuild(dir, modulePath+"/cmd/fuseboxctl", modulePath+"/cmd/fusebox-agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	ctlBinary, agentBinary = filepath.Join(dir, "fuseboxctl"), filepath.Join(dir, "fusebox-agent")
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the directory of the root module's go.mod, found upwards
// from the working directory (a test runs in its package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for { // bounded by the file system's root
		if p, err := modulePathOf(filepath.Join(dir, "go.mod")); err == nil && p == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// modulePathOf reads the module line of a go.mod file.
func modulePathOf(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// goBuild builds the packages (import paths under modulePath) into dir.
// Each is built in the directory of the go.mod that holds it (the nearest
// one above the package's directory), so that it builds whether the
// repository is one module or several nested ones with replace
// directives.
func goBuild(dir string, pkgs ...string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s needs the go command on PATH: %w", strings.Join(pkgs, " "), err)
	}
	for _, pkg := range pkgs {
		rel, ok := strings.CutPrefix(pkg, modulePath+"/")
		if !ok {
			return fmt.Errorf("goBuild(%s): not a package of %s", pkg, modulePath)
		}
		modDir, err := moduleDir(root, filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		cmd := exec.Command(goCmd, "build", "-o", dir+string(filepath.Separator), pkg)
		cmd.Dir = modDir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s (in %s): %w\n%s", pkg, modDir, err, out.String())
		}
	}
	return nil
}

// moduleDir is the directory of the go.mod nearest above pkgDir, at most
// root.
func moduleDir(root, pkgDir string) (string, error) {
	for dir := pkgDir; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if dir == root || filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod between %s and %s", pkgDir, root)
		}
	}
}
