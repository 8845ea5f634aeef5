package secretfile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode    os.FileMode
		exposed bool
	}{
		{0o600, false}, {0o400, false}, {0o700, false},
		{0o640, true}, {0o604, true}, {0o644, true}, {0o660, true}, {0o602, true}, {0o610, true}, {0o601, true},
	} {
		p := filepath.Join(dir, "key-"+tc.mode.String())
		if err := os.WriteFile(p, []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		err := secretfile.Check(p)
		if got := errors.Is(err, secretfile.ErrExposed); got != tc.exposed {
			t.Errorf("mode %04o: Check = %v, want exposed=%v", tc.mode, err, tc.exposed)
		}
		if tc.exposed && (!strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "chmod 600")) {
			t.Errorf("mode %04o: message %q should name the file and the fix", tc.mode, err)
		}
		data, rerr := secretfile.Read(p)
		if tc.exposed != (rerr != nil) || (!tc.exposed && string(data) != "s3cret") {
			t.Errorf("mode %04o: Read = %q, %v", tc.mode, data, rerr)
		}
	}
}

func TestCheckMissingAndDirectory(t *testing.T) {
	dir := t.TempDir()
	err := secretfile.Check(filepath.Join(dir, "nope"))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, secretfile.ErrExposed) {
		t.Errorf("missing file: %v", err)
	}
	if err := secretfile.Check(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

func TestCheckFollowsSymlinkToTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := secretfile.Check(link); !errors.Is(err, secretfile.ErrExposed) {
		t.Errorf("symlink to a 0644 file: %v", err)
	}
}
