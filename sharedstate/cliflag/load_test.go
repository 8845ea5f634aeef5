package cliflag

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testConfig is a daemon's configuration for the tests.
type testConfig struct {
	Addr  string
	Peers []string
	Every time.Duration
	N     int
	Off   bool
	Path  string
}

func testDefaults() testConfig {
	return testConfig{Addr: "127.0.0.1:1", Every: time.Second, N: 3}
}

func testFlags(c *testConfig) *flag.FlagSet {
	fs := NewFlagSet("fusebox-test")
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	fs.Var(List(&c.Peers), "peers", "comma-separated peers (default: none)")
	fs.DurationVar(&c.Every, "every", c.Every, "how often")
	fs.IntVar(&c.N, "n", c.N, "how many")
	fs.BoolVar(&c.Off, "off", c.Off, "turn it off")
	fs.StringVar(&c.Path, "path", c.Path, "a file (default: none)")
	return fs
}

// fileToJSON stands in for a YAML decoder: the test files are JSON.
func fileToJSON(b []byte) ([]byte, error) {
	if !json.Valid(b) {
		return nil, errors.New("not JSON")
	}
	return b, nil
}

var testCommand = Command[testConfig]{Name: "fusebox-test", Scope: "test config", About: "A test daemon.",
	Defaults: testDefaults, Flags: testFlags, FileToJSON: fileToJSON}

func TestEnvName(t *testing.T) {
	for flag, env := range map[string]string{"gossip-addr": "FUSEBOX_GOSSIP_ADDR", "etcd": "FUSEBOX_ETCD", "keyring-file": "FUSEBOX_KEYRING_FILE"} {
		if got := EnvName(flag); got != env {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, env)
		}
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Flags win over the environment, which wins over the file, which wins
// over the defaults; lists replace each other whole.
func TestLoadPrecedence(t *testing.T) {
	file := writeFile(t, `{"addr": "127.0.0.1:2", "peers": ["a", "b"], "every": "3s", "n": 4, "off": true, "path": null}`)
	env := map[string]string{"FUSEBOX_CONFIG": file, "FUSEBOX_N": "5", "FUSEBOX_ADDR": "127.0.0.1:3", "FUSEBOX_UNRELATED": "x", "FUSEBOX_PATH": ""}
	cfg, err := Load(testCommand, []string{"--addr", "127.0.0.1:4"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := testConfig{Addr: "127.0.0.1:4", Peers: []string{"a", "b"}, Every: 3 * time.Second, N: 5, Off: true}
	if cfg.Addr != want.Addr || !slices.Equal(cfg.Peers, want.Peers) || cfg.Every != want.Every || cfg.N != want.N || cfg.Off != want.Off || cfg.Path != "" {
		t.Errorf("Load = %+v, want %+v", cfg, want)
	}
	env["FUSEBOX_PEERS"] = "c"
	cfg, err = Load(testCommand, []string{"--peers=d,e"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || !slices.Equal(cfg.Peers, []string{"d", "e"}) {
		t.Errorf("--peers over FUSEBOX_PEERS over the file: %q, %v", cfg.Peers, err)
	}
	cfg, err = Load(testCommand, nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || !slices.Equal(cfg.Peers, []string{"c"}) {
		t.Errorf("FUSEBOX_PEERS over the file: %q, %v", cfg.Peers, err)
	}
	// No file, no environment: the defaults.
	cfg, err = Load(testCommand, nil, func(string) string { return "" }, io.Discard)
	if err != nil || cfg.Addr != "127.0.0.1:1" || cfg.Peers != nil || cfg.N != 3 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	// --config on the command line wins over FUSEBOX_CONFIG.
	other := writeFile(t, `{"n": 9}`)
	cfg, err = Load(testCommand, []string{"--config=" + other}, func(k string) string { return map[string]string{"FUSEBOX_CONFIG": file}[k] }, io.Discard)
	if err != nil || cfg.N != 9 || cfg.Addr != "127.0.0.1:1" {
		t.Errorf("--config over FUSEBOX_CONFIG: %+v, %v", cfg, err)
	}
}

// Every refusal names what is wrong and where: the key and the file, the
// variable and the flag.
func TestLoadRefusals(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, c := range []struct {
		name string
		file string
		env  map[string]string
		args []string
		want []string
	}{
		{name: "unknown key", file: `{"adr": "x", "n": 2}`, want: []string{`: unknown key "adr": fusebox-test has no flag --adr`}},
		{name: "bad value", file: `{"every": 5, "n": "many"}`, want: []string{`: key "every": "5": `, `: key "n": "many": `}},
		{name: "config in the file", file: `{"config": "/etc/other"}`, want: []string{`: key "config": a file cannot name another file`}},
		{name: "mapping value", file: `{"peers": {"a": 1}}`, want: []string{`: key "peers": a mapping`}},
		{name: "nested list", file: `{"peers": [["a"]]}`, want: []string{`: key "peers": a list inside a list`}},
		{name: "not a mapping", file: `["addr"]`, want: []string{": not a mapping of flag names to values"}},
		{name: "not the format", file: `addr: x`, want: []string{": not JSON"}},
		{name: "bad variable", env: map[string]string{"FUSEBOX_EVERY": "soon", "FUSEBOX_OFF": "maybe"},
			want: []string{`test config: FUSEBOX_EVERY="soon": --every: `, `FUSEBOX_OFF="maybe": --off: `}},
		{name: "bad flag", args: []string{"--every", "soon"}, want: []string{`invalid value "soon" for flag -every`}},
		{name: "unknown flag", args: []string{"--evry", "1s"}, want: []string{"flag provided but not defined: -evry"}},
		{name: "argument", args: []string{"stray"}, want: []string{`test config: unexpected arguments ["stray"]`}},
		{name: "missing file", args: []string{"--config", "/nonexistent/x.yaml"}, want: []string{"test config: --config: open /nonexistent/x.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			var file string
			if c.file != "" {
				file = writeFile(t, c.file)
				args = append([]string{"--config", file}, args...)
			}
			getenv := noEnv
			if c.env != nil {
				getenv = func(k string) string { return c.env[k] }
			}
			_, err := Load(testCommand, args, getenv, io.Discard)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if file != "" && strings.HasPrefix(w, ": ") {
					w = "test config: " + file + w
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// -h writes the help: usage line, about, the environment and file rules,
// and every flag with its default.
func TestLoadHelp(t *testing.T) {
	var help strings.Builder
	_, err := Load(testCommand, []string{"-h"}, func(string) string { return "" }, &help)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	want := `Usage: fusebox-test [flags]

A test daemon.

Every flag can also be set by the environment variable FUSEBOX_<FLAG>
(--addr: FUSEBOX_ADDR) and by the key <flag> in the YAML
file named by --config or FUSEBOX_CONFIG. Flags win over the environment,
which wins over the file, which wins over the defaults.

Flags:
  -addr string
    	listen address (default "127.0.0.1:1")
  -config string
    	YAML file of settings, keys named like the flags; flags and environment win (default: none)
  -every duration
    	how often (default 1s)
  -n int
    	how many (default 3)
  -off
    	turn it off (default false)
  -path string
    	a file (default: none)
  -peers list
    	comma-separated peers (default: none)
`
	if help.String() != want {
		t.Errorf("help:\n%s\nwant:\n%s", help.String(), want)
	}
}

func TestTable(t *testing.T) {
	def := testDefaults()
	got, err := Table(testFlags(&def))
	if err != nil {
		t.Fatal(err)
	}
	want := "| flag | environment variable | file key | default | meaning |\n| --- | --- | --- | --- | --- |\n" +
		"| `--addr` | `FUSEBOX_ADDR` | `addr` | `127.0.0.1:1` | listen address |\n" +
		"| `--config` | `FUSEBOX_CONFIG` | — | none | YAML file of settings, keys named like the flags; flags and environment win |\n" +
		"| `--every` | `FUSEBOX_EVERY` | `every` | `1s` | how often |\n" +
		"| `--n` | `FUSEBOX_N` | `n` | `3` | how many |\n" +
		"| `--off` | `FUSEBOX_OFF` | `off` | `false` | turn it off |\n" +
		"| `--path` | `FUSEBOX_PATH` | `path` | none | a file |\n" +
		"| `--peers` | `FUSEBOX_PEERS` | `peers` | none | comma-separated peers |\n"
	if got != want {
		t.Errorf("Table:\n%s\nwant:\n%s", got, want)
	}
	fs := NewFlagSet("x")
	fs.String("mystery", "", "what empty means is unsaid")
	fs.String("pipe", "a|b", "one | two (default: a (or b))")
	fs.String("token", "x", "a name clients' variables use")
	got, err = Table(fs)
	if err == nil || !strings.Contains(err.Error(), "--mystery: its default is empty") {
		t.Errorf("an unstated empty default: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "--token: its variable FUSEBOX_TOKEN is read by clientlib or fuseboxctl") {
		t.Errorf("a flag named like a client's variable: %v", err)
	}
	if !strings.Contains(got, "| a (or b) | one \\| two |") {
		t.Errorf("stated default with parentheses, escaped pipe:\n%s", got)
	}
}

func TestListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, err = Listen("http-addr", addr)
	if err == nil || err.Error() != "--http-addr "+addr+": address already in use" || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen on a busy port: %v", err)
	}
	var le *ListenError
	if !errors.As(err, &le) || le.Flag != "http-addr" || le.Addr != addr {
		t.Errorf("not a *ListenError naming the flag: %#v", err)
	}
	_, raw := net.Listen("tcp", addr)
	wrapped := AsListenError("grpc-addr", addr, errors.Join(errors.New("context"), raw))
	if wrapped.Error() != "--grpc-addr "+addr+": address already in use" {
		t.Errorf("AsListenError = %v", wrapped)
	}
	if other := errors.New("not a bind"); AsListenError("grpc-addr", addr, other) != other || AsListenError("x", "", nil) != nil {
		t.Errorf("AsListenError changed an error that is no bind failure")
	}
	if url := AsListenError("embedded-etcd-url", "http://"+addr, raw); url.Error() != "--embedded-etcd-url http://"+addr+": address already in use" {
		t.Errorf("AsListenError of a URL flag = %v", url)
	}
	if AsListenError("gossip-addr", "127.0.0.1:1", raw) != raw {
		t.Errorf("AsListenError blamed --gossip-addr for a bind of another port: %v", raw)
	}
	if AsListenError("other", addr, err) != err {
		t.Errorf("AsListenError wrapped a *ListenError again")
	}
}

// CheckHelp passes a help that shows every real default and names each
// flag whose help hides or misstates its default.
func TestCheckHelp(t *testing.T) {
	if err := CheckHelp(testCommand); err != nil {
		t.Errorf("CheckHelp of a right help: %v", err)
	}
	bad := testCommand
	bad.Flags = func(c *testConfig) *flag.FlagSet {
		fs := NewFlagSet("fusebox-test")
		fs.StringVar(&c.Addr, "addr", "127.0.0.1:9", "listen address")           // not the configuration's default
		fs.Var(List(&c.Peers), "peers", "comma-separated peers (default: none)") // right
		fs.DurationVar(&c.Every, "every", c.Every, "how often (default: never)") // states an empty default, but it is 1s
		fs.IntVar(&c.N, "n", 0, "how many")                                      // not the configuration's default
		fs.BoolVar(&c.Off, "off", c.Off, "turn it off")
		fs.StringVar(&c.Path, "path", c.Path, "a file (default: none)")
		return fs
	}
	err := CheckHelp(bad)
	if err == nil {
		t.Fatal("CheckHelp passed a help that misstates three defaults")
	}
	for _, want := range []string{"registering the flags changes the default of Addr: 127.0.0.1:1, now 127.0.0.1:9",
		"registering the flags changes the default of N: 3, now 0",
		`--every: the help states the default "never", but the default is "1s"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHelp: %v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "--peers") || strings.Contains(err.Error(), "--off") || strings.Contains(err.Error(), "--config") {
		t.Errorf("CheckHelp blamed a right flag: %v", err)
	}
	withHost := testCommand
	withHost.Defaults = func() testConfig { c := testDefaults(); c.Path = "host-1"; return c }
	if err := CheckHelp(withHost, "path"); err != nil {
		t.Errorf("a computed default stated in words: %v", err)
	}
	if err := CheckHelp(withHost); err == nil || !strings.Contains(err.Error(), `--path: the help states the default "none", but the default is "host-1"`) {
		t.Errorf("a computed default not declared: %v", err)
	}
}
