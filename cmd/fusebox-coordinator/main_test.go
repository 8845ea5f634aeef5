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
