package clientlib

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The module graph a service gets from Fusebox (clientlib/README.md, "Adopting
// clientlib" and "Modules"): a throwaway module that imports clientlib and
// clientlib/idempotency is tidied and its `go list -m all` compared with
// that of a module importing only grpc, protobuf and client_golang (the
// floor: what those three bring on their own), and with that of one
// importing redisstore too.

const (
	fuseboxModule    = "github.com/fusebox-dev/fusebox"
	redisstoreModule = fuseboxModule + "/clientlib/idempotency/redisstore"
	redisModule      = "github.com/redis/go-redis/v9"
)

// heavyModules are module path prefixes a service that imports only
// clientlib must never find in its module graph: they are the daemons',
// the etcd store's, gossip's, the Redis store's and the deploy and browser
// tests' dependencies, and the other Fusebox modules that hold them.
var heavyModules = []string{
	"go.etcd.io/", // etcd server, client and api, bbolt, raft
	"github.com/hashicorp/memberlist",
	"github.com/redis/go-redis/",
	"github.com/chromedp/",
	"k8s.io/",
	"sigs.k8s.io/", // kustomize and the Kubernetes YAML libraries
	fuseboxModule + "/",
}

// beyondFloor are the modules a clientlib service may have beyond the
// floor, and why: Fusebox itself and the root module's test-only
// requirements, which its go.mod lists (so every consumer's graph has
// them, though no consumer builds them).
var beyondFloor = map[string]string{
	fuseboxModule:                  "Fusebox itself",
	"pgregory.net/rapid":           "the root module's property tests",
	"go.uber.org/goleak":           "the root module's leak checks",
	"github.com/sony/gobreaker/v2": "clientlib's benchmark baseline",
}

// floorModules are what the floor module requires, at the versions the
// root go.mod requires them.
var floorModules = map[string]string{
	"google.golang.org/grpc":              "google.golang.org/grpc",
	"google.golang.org/protobuf":          "google.golang.org/protobuf/proto",
	"github.com/prometheus/client_golang": "github.com/prometheus/client_golang/prometheus",
}

// TestModuleGraph checks that a service importing clientlib gets the floor
// plus beyondFloor and nothing heavy, and that adding redisstore adds only
// go-redis and what go-redis requires. It resolves modules from the module
// cache alone (GOPROXY=off) and falls back to $GOPROXY when the cache
// lacks one; without either it fails saying so.
func TestModuleGraph(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	g := &graphs{t: t, root: root, offline: true}

	client := g.consumer("clientlib", map[string]string{fuseboxModule: root},
		fuseboxModule+"/clientlib", fuseboxModule+"/clientlib/idempotency")
	clientMods := g.list(client)

	// The floor also requires what clientlib's module requires, at the
	// versions it selected (tidy drops what the floor does not use): both
	// compare like with like and resolve from the same module cache.
	rootReqs := g.requires(root)
	var floorImports []string
	floorReqs := map[string]string{}
	for _, r := range g.requires(client.dir) {
		if r.Path != fuseboxModule {
			floorReqs[r.Path] = r.Version
		}
	}
	for mod, pkg := range floorModules {
		i := slices.IndexFunc(rootReqs, func(r modReq) bool { return r.Path == mod })
		if i < 0 {
			t.Fatalf("the root go.mod does not require %s", mod)
		}
		floorReqs[mod] = rootReqs[i].Version
		floorImports = append(floorImports, pkg)
	}
	floor := g.module("floor", floorReqs, nil, nil, floorImports...)
	g.tidy(floor)
	floorMods := g.list(floor)

	for _, m := range clientMods {
		if prefixOf(heavyModules, m) != "" {
			t.Errorf("a service importing clientlib gets %s in its module graph", m)
		}
	}
	var extra []string
	beyond := minus(clientMods, floorMods)
	for _, m := range beyond {
		if _, ok := beyondFloor[m]; !ok {
			extra = append(extra, m)
		}
	}
	if len(extra) > 0 {
		t.Errorf("a service importing clientlib gets %d modules that grpc, protobuf and client_golang do not bring, and that beyondFloor does not allow: %s",
			len(extra), strings.Join(extra, ", "))
	}

	redis := g.consumer("redisstore", map[string]string{
		fuseboxModule:    root,
		redisstoreModule: filepath.Join(root, "clientlib", "idempotency", "redisstore"),
	}, fuseboxModule+"/clientlib", fuseboxModule+"/clientlib/idempotency", redisstoreModule)
	redisMods := g.list(redis)
	fromRedis := g.reachable(redis, redisModule)
	added := minus(redisMods, clientMods)
	for _, m := range added {
		if m != redisstoreModule && !fromRedis[m] {
			t.Errorf("importing redisstore adds %s, which go-redis does not require", m)
		}
	}
	for _, m := range redisMods {
		if prefixOf(heavyModules, m) != "" && m != redisModule && m != redisstoreModule {
			t.Errorf("a service importing redisstore gets %s in its module graph", m)
		}
	}

	t.Logf("go list -m all of a module importing clientlib and clientlib/idempotency: %d modules (+%d beyond the floor: %s)", len(clientMods), len(beyond), strings.Join(beyond, ", "))
	t.Logf("go list -m all of a module importing only grpc, protobuf and client_golang: %d modules", len(floorMods))
	t.Logf("go list -m all of a module importing redisstore too: %d modules (+%d: %s)", len(redisMods), len(added), strings.Join(added, ", "))
}

// graphs makes throwaway modules in t.TempDir() and resolves them.
type graphs struct {
	t       *testing.T
	root    string // the repository root
	offline bool   // GOPROXY=off (the module cache alone)
}

// throwaway is a throwaway module. All have one module path, which the
// comparisons then ignore.
type throwaway struct {
	dir, path string
}

type modReq struct {
	Path, Version string
}

// consumer is a tidied module importing pkgs of the Fusebox modules in
// replaces (module path → folder).
func (g *graphs) consumer(name string, replaces map[string]string, pkgs ...string) throwaway {
	reqs := map[string]string{}
	var sums []string
	for mod, dir := range replaces {
		reqs[mod] = "v0.0.0-00010101000000-000000000000"
		sums = append(sums, filepath.Join(dir, "go.sum"))
	}
	m := g.module(name, reqs, replaces, sums, pkgs...)
	g.tidy(m)
	return m
}

// module writes a module requiring reqs (path → version), with replaces
// and a go.sum made of sums (default: the root's), whose main package
// imports pkgs.
func (g *graphs) module(name string, reqs, replaces map[string]string, sums []string, pkgs ...string) throwaway {
	g.t.Helper()
	m := throwaway{dir: filepath.Join(g.t.TempDir(), name), path: "example.com/service"}
	if err := os.Mkdir(m.dir, 0o755); err != nil {
		g.t.Fatal(err)
	}
	g.run(m.dir, "mod", "init", m.path)
	args := []string{"mod", "edit"}
	for mod, v := range reqs {
		args = append(args, "-require="+mod+"@"+v)
	}
	for mod, dir := range replaces {
		args = append(args, "-replace="+mod+"="+dir)
	}
	g.run(m.dir, args...)

	main := "package main\n\nimport (\n"
	for _, p := range pkgs {
		main += fmt.Sprintf("\t_ %q\n", p)
	}
	main += ")\n\nfunc main() {}\n"
	if err := os.WriteFile(filepath.Join(m.dir, "main.go"), []byte(main), 0o644); err != nil {
		g.t.Fatal(err)
	}
	// The repository's checksums: no checksum database is asked about
	// modules the repository already uses.
	if len(sums) == 0 {
		sums = []string{filepath.Join(g.root, "go.sum")}
	}
	seen := map[string]bool{}
	var sum strings.Builder
	for _, f := range sums {
		b, err := os.ReadFile(f)
		if err != nil {
			g.t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line != "" && !seen[line] {
				seen[line] = true
				sum.WriteString(line + "\n")
			}
		}
	}
	if err := os.WriteFile(filepath.Join(m.dir, "go.sum"), []byte(sum.String()), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return m
}

// tidy runs `go mod tidy` in m: from the module cache alone, else (once
// that has failed) through $GOPROXY.
func (g *graphs) tidy(m throwaway) {
	g.t.Helper()
	_, err := g.try(m.dir, "mod", "tidy")
	if err != nil && g.offline {
		if proxy := goproxy(); proxy != "off" {
			g.t.Logf("the module cache alone (GOPROXY=off) lacks modules a throwaway module needs: resolving through GOPROXY=%s", proxy)
			g.offline = false
			_, err = g.try(m.dir, "mod", "tidy")
		}
	}
	if err != nil {
		g.t.Fatalf("resolving a throwaway module's dependencies needs the Go module proxy or a module cache holding those of the Fusebox modules (GOPROXY=%s): %v", goproxy(), err)
	}
}

// list returns the module paths of `go list -m all` in m, sorted.
func (g *graphs) list(m throwaway) []string {
	var mods []string
	for _, line := range strings.Split(strings.TrimSpace(g.run(m.dir, "list", "-m", "all")), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			mods = append(mods, f[0])
		}
	}
	sort.Strings(mods)
	return mods
}

// requires returns the requirements of the go.mod in dir.
func (g *graphs) requires(dir string) []modReq {
	g.t.Helper()
	var mod struct{ Require []modReq }
	if err := json.Unmarshal([]byte(g.run(dir, "mod", "edit", "-json")), &mod); err != nil {
		g.t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	return mod.Require
}

// reachable returns the module paths reachable from module path from in
// m's `go mod graph`, from itself included.
func (g *graphs) reachable(m throwaway, from string) map[string]bool {
	edges := map[string][]string{}
	var todo []string
	for _, line := range strings.Split(g.run(m.dir, "mod", "graph"), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		edges[f[0]] = append(edges[f[0]], f[1])
		if modPath(f[0]) == from {
			todo = append(todo, f[0])
		}
	}
	seen := map[string]bool{}
	out := map[string]bool{}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		out[modPath(n)] = true
		todo = append(todo, edges[n]...)
	}
	return out
}

// run runs the go command in dir and returns its standard output, failing
// the test on an error.
func (g *graphs) run(dir string, args ...string) string {
	g.t.Helper()
	out, err := g.try(dir, args...)
	if err != nil {
		g.t.Fatal(err)
	}
	return out
}

// try runs the go command in dir, outside any workspace, with -mod=mod and
// the local toolchain (and GOPROXY=off while offline).
func (g *graphs) try(dir string, args ...string) (string, error) {
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	if g.offline {
		cmd.Env = append(cmd.Env, "GOPROXY=off")
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out), nil
}

// goTool is the go command running the tests ($GOROOT/bin/go), else the
// one on PATH.
func goTool() string {
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// goproxy is the GOPROXY the go command would use.
func goproxy() string {
	out, err := exec.Command(goTool(), "env", "GOPROXY").Output()
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// modPath is the module path of a `go mod graph` node (path@version).
func modPath(node string) string {
	p, _, _ := strings.Cut(node, "@")
	return p
}

// prefixOf returns the prefix of prefixes that m starts with, or "".
func prefixOf(prefixes []string, m string) string {
	for _, p := range prefixes {
		if strings.HasPrefix(m, p) {
			return p
		}
	}
	return ""
}

// minus returns the elements of a not in b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
