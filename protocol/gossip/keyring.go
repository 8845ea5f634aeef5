package gossip

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

// ErrKeyring is wrapped by every keyring-file error.
var ErrKeyring = errors.New("gossip: keyring")

// ParseKeyring parses a keyring file: one base64 key (16, 24 or 32 bytes for
// AES-128/192/256) per line, blank lines and lines starting with '#'
// ignored. The first key is the primary: it encrypts what this node sends;
// every key decrypts. Rotation: add the new key on a line after the primary
// on every member, then move it to the first line everywhere, then remove the
// old key; a running agent re-reads its file and applies it (ApplyKeyring).
func ParseKeyring(data []byte) (*memberlist.Keyring, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: not base64: %v", ErrKeyring, i+1, err)
		}
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrKeyring, i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrKeyring)
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKeyring, err)
	}
	return kr, nil
}

// LoadKeyringFile reads and parses a keyring file (see ParseKeyring). A
// file its group or others may access is refused (secretfile.Check), like
// every secret file Fusebox reads.
func LoadKeyringFile(path string) (*memberlist.Keyring, error) {
	data, err := secretfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyring, err)
	}
	kr, err := ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return kr, nil
}

// ApplyKeyring makes the running keyring kr hold exactly the keys of next,
// next's primary first: new keys are added, the primary is switched, keys no
// longer listed are removed (memberlist refuses to remove the primary, which
// is why the switch comes first). It reports whether anything changed: when
// kr already holds exactly next's keys with next's primary it does nothing.
// A keyring file rotation (add the new key second everywhere, then move it
// first everywhere, then drop the old one) thus needs no restart.
func ApplyKeyring(kr *memberlist.Keyring, next *memberlist.Keyring) (changed bool, err error) {
	if sameKeyring(kr, next) {
		return false, nil
	}
	want := next.GetKeys()
	for _, k := range want {
		if err := kr.AddKey(k); err != nil {
			return true, fmt.Errorf("%w: add key: %v", ErrKeyring, err)
		}
	}
	if err := kr.UseKey(next.GetPrimaryKey()); err != nil {
		return true, fmt.Errorf("%w: use key: %v", ErrKeyring, err)
	}
	keep := map[string]bool{}
	for _, k := range want {
		keep[string(k)] = true
	}
	for _, k := range kr.GetKeys() {
		if !keep[string(k)] {
			if err := kr.RemoveKey(k); err != nil {
				return true, fmt.Errorf("%w: remove key: %v", ErrKeyring, err)
			}
		}
	}
	return true, nil
}

// sameKeyring says whether kr already holds exactly next's keys with next's
// primary.
func sameKeyring(kr, next *memberlist.Keyring) bool {
	if !bytes.Equal(kr.GetPrimaryKey(), next.GetPrimaryKey()) {
		return false
	}
	have, want := kr.GetKeys(), next.GetKeys()
	if len(have) != len(want) {
		return false
	}
	in := map[string]bool{}
	for _, k := range have {
		in[string(k)] = true
	}
	for _, k := range want {
		if !in[string(k)] {
			return false
		}
	}
	return true
}
