package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/fusebox-dev/fusebox"

// dockerUser is the user and group of the image (deploy/docker/Dockerfile),
// which the manifests run as and which owns the agent's socket.
const dockerUser = 65532

// dockerfile is deploy/docker/Dockerfile as instructions: continuation
// lines joined, comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	var out []string
	cur := ""
	for _, line := range strings.Split(readFile(t, "deploy/docker/Dockerfile"), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur == "") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur += s + " "
			continue
		}
		out = append(out, cur+trimmed)
		cur = ""
	}
	return out
}

// goModVersion returns the Go version go.mod asks for: its toolchain line,
// else its go line.
func goModVersion(t *testing.T) string {
	t.Helper()
	var goLine, toolchain string
	for _, line := range strings.Split(readFile(t, "go.mod"), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "go":
			goLine = f[1]
		case len(f) == 2 && f[0] == "toolchain":
			toolchain = strings.TrimPrefix(f[1], "go")
		}
	}
	if toolchain != "" {
		return toolchain
	}
	if goLine == "" {
		t.Fatal("go.mod has no go line")
	}
	return goLine
}

// TestDockerfile checks what can be checked without a Docker daemon: the
// build stage's Go is go.mod's, the build is static and trimmed and makes
// every binary under cmd/, the variables it stamps the version into exist,
// and the final stage runs as the manifests' non-root user on an image
// without a shell, with nothing run in it.
func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	var froms []int
	goVersion := ""
	for i, in := range ins {
		switch {
		case strings.HasPrefix(in, "FROM "):
			froms = append(froms, i)
		case strings.HasPrefix(in, "ARG GO_VERSION=") && len(froms) == 0:
			goVersion = strings.TrimPrefix(in, "ARG GO_VERSION=")
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, found %d FROM", len(froms))
	}
	if want := goModVersion(t); goVersion != want {
		t.Errorf("Dockerfile ARG GO_VERSION=%s, go.mod wants Go %s", goVersion, want)
	}
	if first := ins[froms[0]]; !strings.HasPrefix(first, "FROM golang:${GO_VERSION}") {
		t.Errorf("the build stage %q does not use golang:${GO_VERSION}", first)
	}

	build := ""
	for _, in := range ins[froms[0]:froms[len(froms)-1]] {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			build = in
		}
	}
	static := slices.ContainsFunc(ins[froms[0]:froms[len(froms)-1]], func(in string) bool {
		return regexp.MustCompile(`^ENV .*CGO_ENABLED=0\b`).MatchString(in)
	}) || strings.Contains(build, "CGO_ENABLED=0")
	switch {
	case build == "":
		t.Fatal("no RUN … go build in the build stage")
	case !static:
		t.Error("the build does not set CGO_ENABLED=0: the binaries would not be static")
	case !strings.Contains(build, "-trimpath"):
		t.Error("the build does not use -trimpath")
	}
	// The build runs in the folder its RUN changes to (the cmd module's).
	buildDir := "."
	if m := regexp.MustCompile(`\bcd (\S+) &&.*\bgo build\b`).FindStringSubmatch(build); m != nil {
		buildDir = m[1]
	}
	cmds, err := os.ReadDir(filepath.Join(repoRoot, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if !c.IsDir() || !isCommand(t, filepath.Join(repoRoot, "cmd", c.Name())) {
			continue // cmd/internal holds packages, not binaries
		}
		if m := moduleOf(filepath.Join("cmd", c.Name())); m != filepath.Clean(buildDir) {
			t.Errorf("the build runs in %s, but cmd/%s is in the module at %s: go build would refuse it", buildDir, c.Name(), m)
		}
		rel, err := filepath.Rel(buildDir, filepath.Join("cmd", c.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if want := "./" + filepath.ToSlash(rel); !strings.Contains(build, want) {
			t.Errorf("the image does not build cmd/%s (%s in %s)", c.Name(), want, buildDir)
		}
	}
	stamps := regexp.MustCompile(`-X ([\w./-]+)\.(\w+)=`).FindAllStringSubmatch(build, -1)
	if len(stamps) == 0 {
		t.Error("the build stamps no version (-ldflags -X)")
	}
	for _, s := range stamps {
		if err := stringVarExists(s[1], s[2]); err != "" {
			t.Errorf("-X %s.%s: %s (go build ignores -X of a missing variable)", s[1], s[2], err)
		}
	}

	final := ins[froms[len(froms)-1]:]
	if !strings.Contains(final[0], "distroless/static") {
		t.Errorf("final stage %q: want distroless/static (no shell, no package manager)", final[0])
	}
	user := ""
	for _, in := range final[1:] {
		switch {
		case strings.HasPrefix(in, "RUN "):
			t.Errorf("the final stage runs %q: it has no shell", in)
		case strings.HasPrefix(in, "USER "):
			user = strings.TrimPrefix(in, "USER ")
		}
	}
	if want := strconv.Itoa(dockerUser) + ":" + strconv.Itoa(dockerUser); user != want {
		t.Errorf("final stage USER %q, want %s (the manifests' runAsUser and the agent socket's group)", user, want)
	}
}

// stringVarExists reports, as a message, why pkg.name is not a
// package-level string variable ("" when it is).
// isCommand reports whether dir holds a main package (a non-test Go file
// of package main).
func isCommand(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if pf.Name.Name == "main" {
			return true
		}
	}
	return false
}

func stringVarExists(pkg, name string) string {
	rel, ok := strings.CutPrefix(pkg, modulePath+"/")
	if !ok {
		return "not a package of this module"
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(repoRoot, rel, "*.go"))
	if err != nil || len(files) == 0 {
		return "no such package"
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return err.Error()
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok || !slices.ContainsFunc(vs.Names, func(n *ast.Ident) bool { return n.Name == name }) {
					continue
				}
				if gd.Tok != token.VAR {
					return "a constant, not a variable"
				}
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "string" {
					return ""
				}
				if vs.Type == nil && len(vs.Values) == len(vs.Names) {
					if lit, ok := vs.Values[slices.IndexFunc(vs.Names, func(n *ast.Ident) bool { return n.Name == name })].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						return ""
					}
				}
				return "not a string variable"
			}
		}
	}
	return "no such variable"
}

// TestDockerfileCopiesEveryModule checks that the layer before the first
// `go mod download` holds every module's go.mod and go.sum (each folder
// with a go.mod; sharedstate/DESIGN.md, "Modules"), each in its folder: the download then
// sees every module the build's replace directives name.
func TestDockerfileCopiesEveryModule(t *testing.T) {
	copied := map[string]bool{} // go.mod and go.sum paths, from the repository root
	download := false
	for _, in := range dockerfile(t) {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go mod download") {
			download = true
			break
		}
		f := strings.Fields(in)
		if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--") {
			continue
		}
		dest := strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "./"), "/")
		for _, src := range f[1 : len(f)-1] {
			dir, file := filepath.Split(src)
			if filepath.Clean(dir) != filepath.Clean(dest) && !(dir == "" && dest == ".") {
				t.Errorf("COPY %s to %s: a module file must keep its folder", src, f[len(f)-1])
				continue
			}
			copied[filepath.ToSlash(filepath.Join(dir, file))] = true
		}
	}
	if !download {
		t.Fatal("no RUN … go mod download: the modules are not a layer of their own")
	}
	mods := moduleDirs(t)
	if len(mods) < 2 {
		t.Fatalf("found the modules %q: want the root and the nested ones", mods)
	}
	for _, m := range mods {
		for _, f := range []string{"go.mod", "go.sum"} {
			if p := filepath.ToSlash(filepath.Join(m, f)); !copied[p] {
				t.Errorf("the Dockerfile does not COPY %s before go mod download", p)
			}
		}
	}
}

// moduleDirs returns the folders holding a go.mod, from the repository
// root ("." is the root module), dot-folders and testdata left out.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// moduleOf returns the folder of the module holding dir (the nearest
// go.mod at or above it), both from the repository root.
func moduleOf(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(repoRoot, d, "go.mod")); err == nil || d == "." {
			return d
		}
	}
}

// TestDockerignore checks that the build context keeps what the build
// needs (go.mod, go.sum, every package) and drops the repository's history.
func TestDockerignore(t *testing.T) {
	var patterns []string
	for _, line := range strings.Split(readFile(t, ".dockerignore"), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
		}
	}
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore does not exclude .git")
	}
	needed := []string{"go.mod", "go.sum"}
	entries, _ := os.ReadDir(repoRoot)
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "deploy" && e.Name() != "bin" {
			needed = append(needed, e.Name())
		}
	}
	for _, n := range needed {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, n); ok || p == "*" || p == "**" {
				t.Errorf(".dockerignore pattern %q drops %s, which the build needs", p, n)
			}
		}
	}
}

// TestMakeImage checks that `make image` builds this Dockerfile from the
// repository root.
func TestMakeImage(t *testing.T) {
	mk := readFile(t, "Makefile")
	m := regexp.MustCompile(`(?m)^image:.*\n((?:\t.*\n)+)`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no image target")
	}
	if !strings.Contains(m[1], "-f deploy/docker/Dockerfile") || !regexp.MustCompile(`\s\.\s*$`).MatchString(strings.TrimSpace(m[1])+" ") {
		t.Errorf("make image does not build -f deploy/docker/Dockerfile with the repository root as context:\n%s", m[1])
	}
}
