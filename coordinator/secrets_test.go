package coordinator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestSecretFilesRefusedWhenExposed: the tokens file, the TLS key and the
// etcd password file are refused at start when group/other-readable, the
// error naming the file and its mode.
func TestSecretFilesRefusedWhenExposed(t *testing.T) {
	exposed := func(t *testing.T, name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, cfg *Config) string // returns the exposed file
	}{
		{"tokens file", func(t *testing.T, cfg *Config) string {
			cfg.TokensFile = exposed(t, "tokens", testTokens)
			return cfg.TokensFile
		}},
		{"tls key", func(t *testing.T, cfg *Config) string {
			ca, caKey := newCA(t)
			base := issue(t, ca, caKey, "localhost", filepath.Join(t.TempDir(), "server"), true)
			cfg.TLSCert, cfg.TLSKey = base+".pem", base+".key"
			if err := os.Chmod(cfg.TLSKey, 0o644); err != nil {
				t.Fatal(err)
			}
			return cfg.TLSKey
		}},
		{"etcd password file", func(t *testing.T, cfg *Config) string {
			cfg.EmbeddedEtcdURL = ""
			cfg.Etcd = []string{"http://127.0.0.1:1"}
			cfg.EtcdUsername = "fusebox"
			cfg.EtcdPasswordFile = exposed(t, "etcd-password", "secret\n")
			return cfg.EtcdPasswordFile
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			file := tc.setup(t, &cfg)
			c, err := New(cfg, testOptions()...)
			if err == nil {
				err = c.Start(ctxFor(t, 30*time.Second))
				_ = c.Close()
			}
			if !errors.Is(err, secretfile.ErrExposed) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "mode 0644") {
				t.Fatalf("start with a 0644 %s = %v, want a refusal naming %s and mode 0644", tc.name, err, file)
			}
		})
	}
}

// TestTokensReloadOnSIGHUP: a token removed from the tokens file stops
// working when the coordinator gets SIGHUP (file polling is made too slow to
// be what reloads it here).
func TestTokensReloadOnSIGHUP(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg, WithTokensPoll(time.Hour))
	admin := adminClient(t, c.GRPCAddr(), adminToken)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := admin.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); err != nil {
		t.Fatalf("before revocation: %v", err)
	}
	if err := os.WriteFile(cfg.TokensFile, []byte("viewer "+viewerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the revoked admin token refused after SIGHUP", func() bool {
		_, err := admin.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{})
		return status.Code(err) == codes.Unauthenticated
	})
	viewer := adminClient(t, c.GRPCAddr(), viewerToken)
	if _, err := viewer.ListPolicies(context.Background(), &fuseboxv1.ListPoliciesRequest{}); err != nil {
		t.Fatalf("the viewer token after reload: %v", err)
	}
}
