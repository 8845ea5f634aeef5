package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{
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
	cfg, err = parseFlags(nil, io.Discard)
	if err != nil || cfg.GRPCAddr != "127.0.0.1:7960" || cfg.HTTPAddr != "127.0.0.1:7070" {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"--grpc-addr", "0.0.0.0:7960"}, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("public address without tokens: %v", err)
	}
	if _, err := parseFlags([]string{"extra"}, io.Discard); err == nil {
		t.Fatal("a stray argument was accepted")
	}
	if _, err := parseFlags([]string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
}

// TestEmbeddedEtcdExposure: a non-loopback --embedded-etcd-url is refused
// unless the embedded etcd has TLS with client certificates or
// --insecure-embedded-etcd says so; compaction and quota flags are checked.
func TestEmbeddedEtcdExposure(t *testing.T) {
	_, err := parseFlags([]string{"--embedded-etcd-url", "http://0.0.0.0:2379", "--tokens-file", "/etc/fusebox/tokens"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "embedded-etcd-url") || !strings.Contains(err.Error(), "--insecure-embedded-etcd") {
		t.Fatalf("public embedded etcd without TLS: %v", err)
	}
	if _, err := parseFlags([]string{"--embedded-etcd-url", "http://0.0.0.0:2379", "--insecure-embedded-etcd"}, io.Discard); err != nil {
		t.Fatalf("with --insecure-embedded-etcd: %v", err)
	}
	cfg, err := parseFlags([]string{"--embedded-etcd-url", "https://10.0.0.5:2379", "--embedded-etcd-cert", "c.pem",
		"--embedded-etcd-key", "c.key", "--embedded-etcd-client-ca", "ca.pem"}, io.Discard)
	if err != nil || cfg.EmbeddedEtcdClientCA != "ca.pem" {
		t.Fatalf("with TLS: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"--embedded-etcd-url", "https://10.0.0.5:2379", "--embedded-etcd-cert", "c.pem"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "go together") {
		t.Fatalf("a TLS file alone: %v", err)
	}
	for _, args := range [][]string{
		{"--embedded-etcd-compaction", "never"},
		{"--embedded-etcd-compaction", "revision", "--embedded-etcd-compaction-retention", "1h"},
		{"--embedded-etcd-quota-bytes", "-5"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted it", args)
		}
	}
	cfg, err = parseFlags([]string{"--embedded-etcd-compaction", "revision", "--embedded-etcd-compaction-retention", "10000",
		"--embedded-etcd-quota-bytes", "2147483648"}, io.Discard)
	if err != nil || cfg.EmbeddedEtcdCompaction != "revision" || cfg.EmbeddedEtcdQuotaBytes != 2<<30 {
		t.Fatalf("compaction and quota flags: %+v, %v", cfg, err)
	}
}
