// Package secretfile holds the one rule every Fusebox daemon applies to a
// file holding a secret (gossip keyring, admin tokens, TLS private keys, etcd
// passwords): it must not be readable or writable by its group or by others.
// It imports the standard library only.
//
//	if err := secretfile.Check(cfg.KeyringFile); err != nil {
//		return err // "secret file /etc/fusebox/keyring: mode 0644 is group/other-readable; run: chmod 600 /etc/fusebox/keyring"
//	}
//	data, err := secretfile.Read(cfg.KeyringFile) // Check, then os.ReadFile
package secretfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrExposed is wrapped by the error Check returns for a file whose mode
// gives its group or others any access.
var ErrExposed = errors.New("secretfile: group/other-accessible")

// Error is what Check returns: the file, its mode, and the cause (ErrExposed
// or the stat error).
type Error struct {
	Path string
	Mode fs.FileMode
	Err  error
}

func (e *Error) Error() string {
	if errors.Is(e.Err, ErrExposed) {
		return fmt.Sprintf("secret file %s: mode %04o is group/other-accessible (%v); run: chmod 600 %s",
			e.Path, e.Mode.Perm(), ErrExposed, e.Path)
	}
	return fmt.Sprintf("secret file %s: %v", e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Check refuses a secret file that its group or others may read, write or
// execute (any of the mode bits 0077), following symlinks to the file
// itself. It returns nil for a file with mode 0600, 0400 or tighter, and an
// *Error (wrapping ErrExposed, or the os.Stat error) otherwise.
func Check(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return &Error{Path: path, Err: err}
	}
	if !fi.Mode().IsRegular() {
		return &Error{Path: path, Mode: fi.Mode(), Err: errors.New("not a regular file")}
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return &Error{Path: path, Mode: fi.Mode(), Err: ErrExposed}
	}
	return nil
}

// Read checks path with Check and then returns its contents.
func Read(path string) ([]byte, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	return data, nil
}
