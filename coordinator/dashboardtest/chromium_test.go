package dashboardtest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookupOrder(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "my-chromium")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExe := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	onPath := map[string]string{} // name → path of a fake PATH
	lookPath := func(name string) (string, error) {
		if strings.Contains(name, "/") {
			fi, err := os.Stat(name)
			if err != nil {
				return "", err
			}
			if fi.Mode()&0o111 == 0 {
				return "", fs.ErrPermission
			}
			return name, nil
		}
		if p, ok := onPath[name]; ok {
			return p, nil
		}
		return "", errors.New("not found")
	}
	tests := []struct {
		name     string
		env      map[string]string
		path     map[string]string
		want     string
		skip     bool
		wantErr  []string
		wantNone bool
	}{
		{name: "skip wins over everything", env: map[string]string{SkipEnv: "1", ChromiumEnv: exe},
			path: map[string]string{"chromium": "/usr/bin/chromium"}, skip: true},
		{name: "FUSEBOX_CHROMIUM before PATH", env: map[string]string{ChromiumEnv: exe},
			path: map[string]string{"chromium": "/usr/bin/chromium"}, want: exe},
		{name: "a wrong FUSEBOX_CHROMIUM fails, no fallback", env: map[string]string{ChromiumEnv: filepath.Join(dir, "missing")},
			path: map[string]string{"chromium": "/usr/bin/chromium"}, wantNone: true, wantErr: []string{ChromiumEnv + "=", "missing"}},
		{name: "a FUSEBOX_CHROMIUM that is not executable fails", env: map[string]string{ChromiumEnv: notExe},
			wantNone: true, wantErr: []string{"not-executable"}},
		{name: "chromium on PATH", path: map[string]string{"chromium": "/usr/bin/chromium", "chromium-browser": "/snap/bin/chromium-browser"},
			want: "/usr/bin/chromium"},
		{name: "chromium-browser on PATH", path: map[string]string{"chromium-browser": "/snap/bin/chromium-browser"},
			want: "/snap/bin/chromium-browser"},
		{name: "SKIP other than 1 does not skip", env: map[string]string{SkipEnv: "0"}, path: map[string]string{"chromium": "/usr/bin/chromium"},
			want: "/usr/bin/chromium"},
		{name: "none: the error names every fix", wantNone: true,
			wantErr: []string{"make test", "apt-get install chromium", ChromiumEnv + "=", SkipEnv + "=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			onPath = tt.path
			got, skip, err := Lookup(func(k string) string { return tt.env[k] }, lookPath)
			if skip != tt.skip || got != tt.want {
				t.Fatalf("Lookup = %q, skip %v, %v; want %q, skip %v", got, skip, err, tt.want, tt.skip)
			}
			if tt.wantNone != (err != nil) {
				t.Fatalf("Lookup error = %v, want an error: %v", err, tt.wantNone)
			}
			if err != nil && !errors.Is(err, ErrNoChromium) {
				t.Errorf("error %v does not wrap ErrNoChromium", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
