package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/coordinator"
)

// load is coordinator.LoadConfig as main calls it, with an empty
// environment (the test's own may hold FUSEBOX_* variables).
func load(args []string, usage io.Writer) (coordinator.Config, error) {
	return coordinator.LoadConfig(args, func(string) string { return "" }, usage)
}

func TestFlags(t *testing.T) {
	cfg, err := load([]string{
		"--data-dir", "/tmp/x", "--etcd", "https://e1:2379, https://e2:2379", "--etcd-user", "fb", "--etcd-password", "pw",
		"--join", "10.0.0.1:7946,10.0.0.2:7946", "--tokens-file", "/etc/fusebox/tokens",
		"--grpc-addr", "0.0.0.0:7960", "--http-addr", "0.0.0.0:7070", "--log-format", "json",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Etcd, []string{"https://e1:2379", "https://e2:2379"}) || len(cfg.Join) != 2 ||
		cfg.TokensFile != "/etc/fusebox/tokens" || cfg.GRPCAddr != "0.0.0.0:7960" || cfg.LogFormat != "json" {
		t.Fatalf("parsed %+v", cfg)
	}
	// Defaults are loopback, and public addresses need a tokens file.
	cfg, err = load(nil, io.Discard)
	if err != nil || cfg.GRPCAddr != "127.0.0.1:7960" || cfg.HTTPAddr != "127.0.0.1:7070" {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	if _, err := load([]string{"--grpc-addr", "0.0.0.0:7960"}, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("public address without tokens: %v", err)
	}
	if _, err := load([]string{"extra"}, io.Discard); err == nil {
		t.Fatal("a stray argument was accepted")
	}
	if _, err := load([]string{"--help"}, io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
}

// TestEmbeddedEtcdExposure: a non-loopback --embedded-etcd-url is refused
// unless the embedded etcd has TLS with client certificates or
// --insecure-embedded-etcd says so; compaction and quota flags are checked.
func TestEmbeddedEtcdExposure(t *testing.T) {
	_, err := load([]string{"--embedded-etcd-url", "http://0.0.0.0:2379", "--tokens-file", "/etc/fusebox/tokens"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "embedded-etcd-url") || !strings.Contains(err.Error(), "--insecure-embedded-etcd") {
		t.Fatalf("public embedded etcd without TLS: %v", err)
	}
	if _, err := load([]string{"--embedded-etcd-url", "http://0.0.0.0:2379", "--insecure-embedded-etcd"}, io.Discard); err != nil {
		t.Fatalf("with --insecure-embedded-etcd: %v", err)
	}
	cfg, err := load([]string{"--embedded-etcd-url", "https://10.0.0.5:2379", "--embedded-etcd-cert", "c.pem",
		"--embedded-etcd-key", "c.key", "--embedded-etcd-client-ca", "ca.pem"}, io.Discard)
	if err != nil || cfg.EmbeddedEtcdClientCA != "ca.pem" {
		t.Fatalf("with TLS: %+v, %v", cfg, err)
	}
	if _, err := load([]string{"--embedded-etcd-url", "https://10.0.0.5:2379", "--embedded-etcd-cert", "c.pem"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "go together") {
		t.Fatalf("a TLS file alone: %v", err)
	}
	for _, args := range [][]string{
		{"--embedded-etcd-compaction", "never"},
		{"--embedded-etcd-compaction", "revision", "--embedded-etcd-compaction-retention", "1h"},
		{"--embedded-etcd-quota-bytes", "-5"},
	} {
		if _, err := load(args, io.Discard); err == nil {
			t.Errorf("load(%q) accepted it", args)
		}
	}
	cfg, err = load([]string{"--embedded-etcd-compaction", "revision", "--embedded-etcd-compaction-retention", "10000",
		"--embedded-etcd-quota-bytes", "2147483648"}, io.Discard)
	if err != nil || cfg.EmbeddedEtcdCompaction != "revision" || cfg.EmbeddedEtcdQuotaBytes != 2<<30 {
		t.Fatalf("compaction and quota flags: %+v, %v", cfg, err)
	}
}

// TestEnvironmentAndFile: fusebox-coordinator takes FUSEBOX_* variables and
// a YAML --config file as the agent does. Each of them sets a flag; flags
// win over the environment, which wins over the file; an unknown key and a
// bad value are refused naming the key, the flag, the variable and the
// file.
func TestEnvironmentAndFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "coordinator.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
name: from-file
data-dir: /file/data
log-format: json
max-dependencies: 500
join: [10.0.0.1:7946, 10.0.0.2:7946]
rejoin-interval: 3s
http-addr: 127.0.0.1:7071
`)
	env := map[string]string{
		"FUSEBOX_CONFIG":           file,
		"FUSEBOX_DATA_DIR":         "/env/data",
		"FUSEBOX_MAX_DEPENDENCIES": "700",
		"FUSEBOX_HTTP_ADDR":        "127.0.0.1:7072",
		"FUSEBOX_ETCD":             "https://e1:2379,https://e2:2379",
	}
	getenv := func(k string) string { return env[k] }
	cfg, err := coordinator.LoadConfig([]string{"--http-addr", "127.0.0.1:7073", "--join=10.0.0.9:7946"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	def := coordinator.DefaultConfig()
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"name (file)", cfg.Name, "from-file"},
		{"log-format (file)", cfg.LogFormat, "json"},
		{"rejoin-interval (file)", cfg.RejoinInterval, 3 * time.Second},
		{"data-dir (environment over file)", cfg.DataDir, "/env/data"},
		{"max-dependencies (environment over file)", cfg.MaxDependencies, 700},
		{"etcd (environment, a list)", strings.Join(cfg.Etcd, " "), "https://e1:2379 https://e2:2379"},
		{"http-addr (flag over environment over file)", cfg.HTTPAddr, "127.0.0.1:7073"},
		{"join (flag over file)", strings.Join(cfg.Join, " "), "10.0.0.9:7946"},
		{"grpc-addr (default)", cfg.GRPCAddr, def.GRPCAddr},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}

	// --config on the command line wins over FUSEBOX_CONFIG.
	other := filepath.Join(dir, "other.yaml")
	if err := os.WriteFile(other, []byte("name: other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := coordinator.LoadConfig([]string{"--config", other}, getenv, io.Discard); err != nil || cfg.Name != "other" {
		t.Errorf("--config over FUSEBOX_CONFIG: name %q, %v", cfg.Name, err)
	}

	// Refusals name what is wrong, and where; main exits 2.
	write("name: x\nhistory-fien: 10m\nshutdown-timeout: 5\n")
	var stderr bytes.Buffer
	if code := run(nil, getenv, &stderr); code != 2 {
		t.Errorf("a bad file: exit code %d, want 2", code)
	}
	for _, want := range []string{file + `:2: unknown key "history-fien"`, "has no flag --history-fien",
		file + `:3: key "shutdown-timeout": "5"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("a bad file: %q lacks %q", stderr.String(), want)
		}
	}
	write("name: x\n")
	env["FUSEBOX_AUDIT_RETENTION"] = "forever"
	_, err = coordinator.LoadConfig(nil, getenv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `FUSEBOX_AUDIT_RETENTION="forever": --audit-retention`) {
		t.Errorf("a bad variable: %v", err)
	}
}

// TestHelp: --help lists every flag with its default and says how the
// environment and the file set them.
func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--help"}, func(string) string { return "" }, &stderr); code != 0 {
		t.Fatalf("--help: exit code %d", code)
	}
	for _, want := range []string{"FUSEBOX_GOSSIP_ADDR", "--config string ", "--grpc-addr string ",
		`address of the Admin gRPC API (default "127.0.0.1:7960")`, "(default: coordinator-<hostname>)", "--insecure-gossip "} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stderr.String())
		}
	}
}
