package deploy_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/agent"
)

// unitFile is a parsed systemd unit or environment file: section → key →
// values in order ("" is the section of an environment file).
type unitFile map[string]map[string][]string

func (u unitFile) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseUnit parses the subset of systemd's syntax these files use: sections,
// key=value lines, comments. Environment files are key=value lines whose
// values may be double-quoted.
func parseUnit(t *testing.T, text string) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			continue
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			continue
		case strings.HasSuffix(line, `\`):
			t.Fatalf("line %d: continuation lines are not supported by this test's parser", n)
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %d: %q is not key=value", n, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if s, err := strconv.Unquote(v); err == nil && strings.HasPrefix(v, `"`) {
			v = s
		}
		if u[section] == nil {
			u[section] = map[string][]string{}
		}
		u[section][k] = append(u[section][k], v)
	}
	return u
}

var unitVar = regexp.MustCompile(`^\$(\w+)$|^\$\{(\w+)\}$`)

// execStart splits the unit's ExecStart into words the way systemd does
// for these units: a word "$VAR" becomes VAR's value split at whitespace,
// "${VAR}" its value as one word. Variables come from Environment= and from
// EnvironmentFile=s under /etc/fusebox, read from deploy/systemd instead.
func execStart(t *testing.T, where string, u unitFile) (words []string, env map[string]string) {
	t.Helper()
	env = map[string]string{}
	for _, e := range u["Service"]["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	for _, f := range u["Service"]["EnvironmentFile"] {
		f = strings.TrimPrefix(f, "-")
		if !strings.HasPrefix(f, "/etc/fusebox/") {
			t.Errorf("%s: EnvironmentFile=%s: the test knows the files of /etc/fusebox only", where, f)
			continue
		}
		ef := parseUnit(t, readFile(t, "deploy/systemd/"+path.Base(f)))
		for k, v := range ef[""] {
			env[k] = v[len(v)-1]
		}
	}
	starts := u["Service"]["ExecStart"]
	if len(starts) != 1 {
		t.Fatalf("%s: want one ExecStart, got %d", where, len(starts))
	}
	for _, w := range strings.Fields(starts[0]) {
		m := unitVar.FindStringSubmatch(w)
		switch {
		case m == nil:
			words = append(words, w)
		case m[1] != "":
			words = append(words, strings.Fields(env[m[1]])...)
		default:
			words = append(words, env[m[2]])
		}
		if m != nil && env[m[1]+m[2]] == "" {
			t.Errorf("%s: ExecStart uses %s, which no Environment or EnvironmentFile sets", where, w)
		}
	}
	return words, env
}

// TestSystemdUnits checks the units: hardening (a dedicated user, no new
// privileges, a read-only system, no capabilities), the socket in the
// RuntimeDirectory and the data in the StateDirectory, the agent's egress
// proxy on loopback, and every flag
// (ExecStart, an EnvironmentFile it uses, the daemon's YAML file) against
// the real flag sets, with the binaries' default ports.
func TestSystemdUnits(t *testing.T) {
	units := map[string]string{"fusebox-agent.service": "fusebox-agent", "fusebox-coordinator.service": "fusebox-coordinator"}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "systemd", "*.service"))
	for _, f := range files {
		if _, ok := units[filepath.Base(f)]; !ok {
			t.Errorf("%s: a unit this test does not know: add it to units", f)
		}
	}
	for name, binary := range units {
		t.Run(name, func(t *testing.T) {
			u := parseUnit(t, readFile(t, "deploy/systemd/"+name))
			svc := func(k string) string { return u.get("Service", k) }
			for k, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
				"PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes"} {
				if _, set := u["Service"][k]; !set || svc(k) != want {
					t.Errorf("%s=%q, want %q", k, svc(k), want)
				}
			}
			if user := svc("User"); (user == "" || user == "root" || user == "0") && svc("DynamicUser") != "yes" {
				t.Errorf("runs as root: set User= to a dedicated user (or DynamicUser=yes)")
			}
			state := svc("StateDirectory")
			if state == "" {
				t.Errorf("no StateDirectory")
			}
			words, env := execStart(t, name, u)
			if words[0] != "/usr/local/bin/"+binary {
				t.Fatalf("ExecStart runs %s, want /usr/local/bin/%s", words[0], binary)
			}
			args := words[1:]

			// --config names /etc/fusebox/<daemon>.yaml: read deploy/systemd's.
			config := false
			for i, a := range args {
				if v, ok := strings.CutPrefix(a, "--config="); ok {
					config = true
					if !strings.HasPrefix(v, "/etc/fusebox/") {
						t.Errorf("--config=%s: the test knows the files of /etc/fusebox only", v)
					}
					args[i] = "--config=" + filepath.Join(repoRoot, "deploy", "systemd", path.Base(v))
				}
			}
			vals, defaults := daemonFlags(t, name, binary, args, env)
			if vals == nil {
				return
			}
			if !config {
				t.Errorf("no --config: the site's settings belong in /etc/fusebox/%s.yaml, as for every daemon", strings.TrimPrefix(binary, "fusebox-"))
			}
			switch binary {
			case "fusebox-agent":
				if rt := svc("RuntimeDirectory"); rt == "" || path.Dir(vals["socket"]) != "/run/"+rt {
					t.Errorf("--socket=%s is not in RuntimeDirectory=%s (/run/%s)", vals["socket"], rt, rt)
				}
				if vals["data-dir"] != "/var/lib/"+state {
					t.Errorf("--data-dir=%s is not StateDirectory=%s (/var/lib/%s)", vals["data-dir"], state, state)
				}
				// The egress proxy has no authentication: on a plain host
				// only the host's own services may reach it.
				if p := vals["proxy-addr"]; p == "" || !isLoopback(host(p)) || vals["insecure-proxy"] == "true" {
					t.Errorf("--proxy-addr=%q --insecure-proxy=%s: serve the egress proxy on loopback", p, vals["insecure-proxy"])
				}
			default:
				if vals["data-dir"] != "/var/lib/"+state {
					t.Errorf("--data-dir=%s is not StateDirectory=%s (/var/lib/%s)", vals["data-dir"], state, state)
				}
			}
			fuseboxListeners(t, name, binary, vals, defaults) // checks the ports against the defaults
			for flag, v := range vals {
				if pathFlags[flag] && v != "" && flag != "config" && !strings.HasPrefix(v, "/etc/fusebox/") &&
					!strings.HasPrefix(v, "/run/") && !strings.HasPrefix(v, "/var/lib/") {
					t.Errorf("--%s=%s: keep configuration in /etc/fusebox, state in the unit's directories", flag, v)
				}
			}
		})
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on the units
// (services and sockets), with
// their ExecStart binaries replaced by executables in a temporary directory
// (verify wants them to exist). Warnings count as failures.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed here: the units are not verified (Debian: apt-get install systemd)")
	}
	dir := t.TempDir()
	services, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "systemd", "*.service"))
	sockets, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "systemd", "*.socket"))
	files := append(services, sockets...)
	if len(services) == 0 || len(sockets) == 0 {
		t.Fatal("no services or sockets in deploy/systemd")
	}
	stand := filepath.Join(dir, "bin")
	if err := os.Mkdir(stand, 0o755); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, f := range files {
		text := readFile(t, filepath.Join("deploy", "systemd", filepath.Base(f)))
		text = strings.ReplaceAll(text, "/usr/local/bin/", stand+"/")
		for _, b := range fuseboxBinaries {
			if err := os.WriteFile(filepath.Join(stand, b), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, out)
	}
	if out, err := verify(sa, args...); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The check can fail: a misspelt key is reported.
	bad := filepath.Join(dir, "bad.service")
	if err := os.WriteFile(bad, []byte("[Service]\nExecStart=/bin/true\nProtectSystm=strict\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(sa, bad); err == nil && len(out) == 0 {
		t.Error("systemd-analyze verify accepts a unit with a misspelt key: this test would not notice one")
	}
}

func verify(sa string, units ...string) ([]byte, error) {
	return exec.Command(sa, append([]string{"verify", "--man=no"}, units...)...).CombinedOutput()
}

// TestSystemdProxySocket checks the socket unit that keeps the egress
// proxy's socket open across agent restarts: it is the service's (Requires,
// After), named as the agent looks for it, and listens where the agent's
// --proxy-addr says, on loopback, or the agent refuses it.
func TestSystemdProxySocket(t *testing.T) {
	sock := parseUnit(t, readFile(t, "deploy/systemd/fusebox-agent.socket"))
	svc := parseUnit(t, readFile(t, "deploy/systemd/fusebox-agent.service"))
	if got := sock.get("Socket", "FileDescriptorName"); got != agent.ProxySocketName {
		t.Errorf("FileDescriptorName=%s, want %s (the agent takes the socket of that name)", got, agent.ProxySocketName)
	}
	if got := sock.get("Socket", "Service"); got != "fusebox-agent.service" {
		t.Errorf("Service=%s, want fusebox-agent.service", got)
	}
	for _, k := range []string{"Requires", "After"} {
		if !strings.Contains(" "+svc.get("Unit", k)+" ", " fusebox-agent.socket ") {
			t.Errorf("fusebox-agent.service: %s=%q lacks fusebox-agent.socket", k, svc.get("Unit", k))
		}
	}
	listen := sock["Socket"]["ListenStream"]
	if len(listen) != 1 {
		t.Fatalf("ListenStream=%v: want the proxy's one address", listen)
	}
	cfg, err := agent.LoadConfig([]string{"--config=" + filepath.Join(repoRoot, "deploy", "systemd", "agent.yaml")}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if listen[0] != cfg.Proxy.Addr || !isLoopback(host(listen[0])) {
		t.Errorf("ListenStream=%s, agent.yaml's proxy-addr %s: want one loopback address", listen[0], cfg.Proxy.Addr)
	}
}
