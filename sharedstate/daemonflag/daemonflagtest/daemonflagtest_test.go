package daemonflagtest

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag"
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
	fs := daemonflag.NewFlagSet("fusebox-test", "A test daemon.")
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	fs.Var(daemonflag.List(&c.Peers), "peers", "comma-separated peers (default: none)")
	fs.DurationVar(&c.Every, "every", c.Every, "how often")
	fs.IntVar(&c.N, "n", c.N, "how many")
	fs.BoolVar(&c.Off, "off", c.Off, "turn it off")
	fs.StringVar(&c.Path, "path", c.Path, "a file (default: none)")
	return fs
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
	fs := daemonflag.NewFlagSet("x", "")
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

// CheckDefaults passes flags whose help shows every real default and names
// each flag whose help hides or misstates its default.
func TestCheckDefaults(t *testing.T) {
	if err := CheckDefaults(testDefaults, testFlags); err != nil {
		t.Errorf("CheckDefaults of right flags: %v", err)
	}
	bad := func(c *testConfig) *pflag.FlagSet {
		fs := daemonflag.NewFlagSet("fusebox-test", "")
		fs.StringVar(&c.Addr, "addr", "127.0.0.1:9", "listen address")                      // not the configuration's default
		fs.Var(daemonflag.List(&c.Peers), "peers", "comma-separated peers (default: none)") // right
		fs.DurationVar(&c.Every, "every", c.Every, "how often (default: never)")            // states an empty default, but it is 1s
		fs.IntVar(&c.N, "n", 0, "how many")                                                 // not the configuration's default
		fs.BoolVar(&c.Off, "off", c.Off, "turn it off")
		fs.Var(upper{&c.Path}, "path", "a file (default: none)") // its text does not set it back
		return fs
	}
	err := CheckDefaults(testDefaults, bad)
	if err == nil {
		t.Fatal("CheckDefaults passed flags that misstate four defaults")
	}
	for _, want := range []string{"registering the flags changes the default of Addr: 127.0.0.1:1, now 127.0.0.1:9",
		"registering the flags changes the default of N: 3, now 0",
		`--every: the help states the default "never", but the default is "1s"`,
		`--path: setting it to its default "" changes Path: , now EMPTY`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckDefaults: %v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "--peers") || strings.Contains(err.Error(), "--off") || strings.Contains(err.Error(), "--config") {
		t.Errorf("CheckDefaults blamed a right flag: %v", err)
	}
	withHost := func() testConfig { c := testDefaults(); c.Path = "host-1"; return c }
	if err := CheckDefaults(withHost, testFlags, "path"); err != nil {
		t.Errorf("a computed default stated in words: %v", err)
	}
	if err := CheckDefaults(withHost, testFlags); err == nil || !strings.Contains(err.Error(), `--path: the help states the default "none", but the default is "host-1"`) {
		t.Errorf("a computed default not declared: %v", err)
	}
}

// upper is a flag value whose Set does not take back what String shows.
type upper struct{ p *string }

func (u upper) String() string { return *u.p }
func (u upper) Set(s string) error {
	if s == "" {
		s = "EMPTY"
	}
	*u.p = s
	return nil
}
func (u upper) Type() string { return "string" }
