package daemonflag

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
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

func testFlags(c *testConfig) *pflag.FlagSet {
	fs := NewFlagSet("fusebox-test", "A test daemon.")
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	fs.Var(List(&c.Peers), "peers", "comma-separated peers (default: none)")
	fs.DurationVar(&c.Every, "every", c.Every, "how often")
	fs.IntVar(&c.N, "n", c.N, "how many")
	fs.BoolVar(&c.Off, "off", c.Off, "turn it off")
	fs.StringVar(&c.Path, "path", c.Path, "a file (default: none)")
	return fs
}

// load is Load of the test daemon, with the environment env.
func load(args []string, env map[string]string) (testConfig, error) {
	cfg := testDefaults()
	err := Load(testFlags(&cfg), args, func(k string) string { return env[k] }, io.Discard)
	return cfg, err
}

func TestEnvName(t *testing.T) {
	for flag, env := range map[string]string{"gossip-addr": "FUSEBOX_GOSSIP_ADDR", "etcd": "FUSEBOX_ETCD", "keyring-file": "FUSEBOX_KEYRING_FILE"} {
		if got := EnvName(flag); got != env {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, env)
		}
	}
}

func TestList(t *testing.T) {
	for in, want := range map[string][]string{
		"":                        nil,
		" , ,":                    nil,
		"a":                       {"a"},
		" a, b,,c ":               {"a", "b", "c"},
		"127.0.0.1:1,[::1]:2379 ": {"127.0.0.1:1", "[::1]:2379"},
	} {
		got := []string{"old"}
		if err := List(&got).Set(in); err != nil || !slices.Equal(got, want) || (want == nil) != (got == nil) {
			t.Errorf("List.Set(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	l := []string{"a", "b"}
	if s := List(&l).String(); s != "a,b" {
		t.Errorf("List.String() = %q, want a,b", s)
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Flags win over the environment, which wins over the file, which wins
// over the defaults; lists replace each other whole.
func TestLoadPrecedence(t *testing.T) {
	file := writeFile(t, "addr: 127.0.0.1:2\npeers: [a, b]\nevery: 3s\nn: 4\noff: true\npath: null\n")
	env := map[string]string{"FUSEBOX_CONFIG": file, "FUSEBOX_N": "5", "FUSEBOX_ADDR": "127.0.0.1:3", "FUSEBOX_UNRELATED": "x", "FUSEBOX_PATH": ""}
	cfg, err := load([]string{"--addr", "127.0.0.1:4"}, env)
	if err != nil {
		t.Fatal(err)
	}
	want := testConfig{Addr: "127.0.0.1:4", Peers: []string{"a", "b"}, Every: 3 * time.Second, N: 5, Off: true}
	if cfg.Addr != want.Addr || !slices.Equal(cfg.Peers, want.Peers) || cfg.Every != want.Every || cfg.N != want.N || cfg.Off != want.Off || cfg.Path != "" {
		t.Errorf("Load = %+v, want %+v", cfg, want)
	}
	env["FUSEBOX_PEERS"] = "c"
	cfg, err = load([]string{"--peers=d,e"}, env)
	if err != nil || !slices.Equal(cfg.Peers, []string{"d", "e"}) {
		t.Errorf("--peers over FUSEBOX_PEERS over the file: %q, %v", cfg.Peers, err)
	}
	cfg, err = load(nil, env)
	if err != nil || !slices.Equal(cfg.Peers, []string{"c"}) {
		t.Errorf("FUSEBOX_PEERS over the file: %q, %v", cfg.Peers, err)
	}
	// A comma-separated string in the file is a list too; a repeated flag
	// replaces the list.
	cfg, err = load([]string{"--config", writeFile(t, "peers: a, b\n")}, nil)
	if err != nil || !slices.Equal(cfg.Peers, []string{"a", "b"}) {
		t.Errorf("peers: a, b: %q, %v", cfg.Peers, err)
	}
	cfg, err = load([]string{"--peers=a", "--peers=b"}, nil)
	if err != nil || !slices.Equal(cfg.Peers, []string{"b"}) {
		t.Errorf("--peers twice: %q, %v", cfg.Peers, err)
	}
	// No file, no environment: the defaults.
	cfg, err = load(nil, nil)
	if err != nil || !equal(cfg, testDefaults()) {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	// --config on the command line wins over FUSEBOX_CONFIG; an empty file
	// sets nothing.
	cfg, err = load([]string{"--config=" + writeFile(t, "n: 9\n")}, map[string]string{"FUSEBOX_CONFIG": file})
	if err != nil || cfg.N != 9 || cfg.Addr != "127.0.0.1:1" {
		t.Errorf("--config over FUSEBOX_CONFIG: %+v, %v", cfg, err)
	}
	if cfg, err = load([]string{"--config", writeFile(t, "# nothing yet\n")}, nil); err != nil || !equal(cfg, testDefaults()) {
		t.Errorf("an empty file: %+v, %v", cfg, err)
	}
}

func equal(a, b testConfig) bool {
	return a.Addr == b.Addr && slices.Equal(a.Peers, b.Peers) && a.Every == b.Every && a.N == b.N && a.Off == b.Off && a.Path == b.Path
}

// Every refusal names what is wrong and where: the file and line and the
// key, or the variable, and the flag. A bad file value or variable is
// refused even where the command line sets its flag.
func TestLoadRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		file string
		env  map[string]string
		args []string
		want []string // ":N: …" is the file's line N
	}{
		{name: "unknown key", file: "n: 2\nadr: x\n", want: []string{`:2: unknown key "adr": fusebox-test has no flag --adr`}},
		{name: "bad value", file: "every: 5\nn: many\n", args: []string{"--every=1s"},
			want: []string{`:1: key "every": "5": time: missing unit in duration "5"`, `:2: key "n": "many": `}},
		{name: "repeated key", file: "n: 2\nn: 3\n", want: []string{`:2: key "n" again: it is on line 1`}},
		{name: "config in the file", file: "config: /etc/other\n", want: []string{`:1: key "config": a file cannot name another file`}},
		{name: "mapping value", file: "peers:\n  a: 1\n", want: []string{`:2: key "peers": want a string, number, boolean or list`}},
		{name: "nested list", file: "peers: [[a]]\n", want: []string{`:1: key "peers": a list holds strings, numbers and booleans only`}},
		{name: "not a mapping", file: "- addr\n", want: []string{":1: not a mapping of flag names to values"}},
		{name: "not YAML", file: "addr: [x\n", want: []string{": yaml: "}},
		{name: "bad variable", env: map[string]string{"FUSEBOX_EVERY": "soon", "FUSEBOX_OFF": "maybe"}, args: []string{"--off"},
			want: []string{`FUSEBOX_EVERY="soon": --every: time: invalid duration "soon"`, `FUSEBOX_OFF="maybe": --off: `}},
		{name: "bad flag", args: []string{"--every", "soon"}, want: []string{`invalid argument "soon" for "--every" flag`}},
		{name: "unknown flag", args: []string{"--evry", "1s"}, want: []string{"unknown flag: --evry"}},
		{name: "argument", args: []string{"stray"}, want: []string{`unexpected arguments ["stray"]`}},
		{name: "missing file", args: []string{"--config", "/nonexistent/x.yaml"}, want: []string{"--config: open /nonexistent/x.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			var file string
			if c.file != "" {
				file = writeFile(t, c.file)
				args = append([]string{"--config", file}, args...)
			}
			_, err := load(args, c.env)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if strings.HasPrefix(w, ":") {
					w = file + w
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// -h and --help write the help: usage line, about, the environment and file
// rules, and every flag with its default.
func TestLoadHelp(t *testing.T) {
	want := `Usage:
  fusebox-test [flags]

A test daemon.

Every flag can also be set by the environment variable FUSEBOX_<FLAG>
(--gossip-addr: FUSEBOX_GOSSIP_ADDR) and by the key <flag> in the YAML
file named by --config or FUSEBOX_CONFIG. Flags win over the environment,
which wins over the file, which wins over the defaults.

Flags:
      --addr string      listen address (default "127.0.0.1:1")
      --config string    YAML file of settings, keys named like the flags; flags and environment win (default: none)
      --every duration   how often (default 1s)
      --n int            how many (default 3)
      --off              turn it off
      --path string      a file (default: none)
      --peers list       comma-separated peers (default: none)
`
	for _, arg := range []string{"-h", "--help"} {
		var help strings.Builder
		cfg := testDefaults()
		if err := Load(testFlags(&cfg), []string{arg}, func(string) string { return "" }, &help); !errors.Is(err, pflag.ErrHelp) {
			t.Fatalf("%s: %v", arg, err)
		}
		if help.String() != want {
			t.Errorf("%s:\n%s\nwant:\n%s", arg, help.String(), want)
		}
	}
}
