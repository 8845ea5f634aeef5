package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

// Role is what a caller may do.
type Role int

const (
	// RoleNone is the zero Role: nothing is allowed.
	RoleNone Role = iota
	// RoleViewer may read: policies, overrides, audit, members, fleet.
	RoleViewer
	// RoleAdmin may also write: policies, overrides.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleAdmin:
		return "admin"
	default:
		return "none"
	}
}

// ParseRole parses "viewer" or "admin".
func ParseRole(s string) (Role, error) {
	switch s {
	case "viewer":
		return RoleViewer, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("unknown role %q (want viewer or admin)", s)
}

// Identity is an authenticated caller.
type Identity struct {
	// Name identifies the credential without revealing it: the NAME column
	// of the tokens file, else "<role>:<first 8 hex digits of the token's
	// SHA-256>", or "loopback" in loopback-only mode.
	Name string
	Role Role
}

// Sentinel errors of Authenticate and Authorize.
var (
	// ErrUnauthenticated: no credential, an unknown one, or a caller the
	// loopback-only mode does not serve.
	ErrUnauthenticated = errors.New("auth: missing or invalid bearer token")
	// ErrPermissionDenied: a valid credential whose role is too low.
	ErrPermissionDenied = errors.New("auth: permission denied")
)

// Tokens is a parsed tokens file. It is immutable and safe for concurrent use.
type Tokens struct {
	byHash map[[sha256.Size]byte]Identity
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.byHash) }

// ParseTokens reads a tokens file: one "ROLE TOKEN [NAME]" per line, ROLE
// viewer or admin, NAME optional (the identity written into the audit);
// blank lines and lines starting with '#' are ignored. A NAME holding a
// control character is refused (it is printed in the audit and on
// terminals: sharedstate.ValidateText). It reports every bad
// line at once, naming line numbers (never the token). A file without a
// single token is an error: it would lock everyone out.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{byHash: map[[sha256.Size]byte]Identity{}}
	var errs []error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 || len(f) > 3 {
			errs = append(errs, fmt.Errorf("line %d: want \"ROLE TOKEN [NAME]\", got %d fields", line, len(f)))
			continue
		}
		role, err := ParseRole(f[0])
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		if len(f[1]) < 16 {
			errs = append(errs, fmt.Errorf("line %d: token too short (%d characters, want at least 16)", line, len(f[1])))
			continue
		}
		h := sha256.Sum256([]byte(f[1]))
		name := role.String() + ":" + hex.EncodeToString(h[:4])
		if len(f) == 3 {
			if err := sharedstate.ValidateText("NAME", f[2]); err != nil {
				errs = append(errs, fmt.Errorf("line %d: %w", line, err))
				continue
			}
			name = f[2]
		}
		if _, dup := t.byHash[h]; dup {
			errs = append(errs, fmt.Errorf("line %d: duplicate token", line))
			continue
		}
		t.byHash[h] = Identity{Name: name, Role: role}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && len(t.byHash) == 0 {
		errs = append(errs, errors.New("no tokens: the file would lock every caller out"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("auth: tokens file: %w", errors.Join(errs...))
	}
	return t, nil
}

// LoadTokensFile reads and parses path (see ParseTokens). The file is a
// secret file (secretfile.Read): refused, naming it and its mode, when its
// group or others may access it.
func LoadTokensFile(path string) (*Tokens, error) {
	data, err := secretfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	t, err := ParseTokens(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// lookup finds the identity of a token. The map is keyed by the token's
// SHA-256, so the lookup's timing says nothing useful about the token.
func (t *Tokens) lookup(token string) (Identity, bool) {
	id, ok := t.byHash[sha256.Sum256([]byte(token))]
	return id, ok
}

// Authenticator decides who a caller is.
//
// With tokens (Tokens non-nil) a caller must present a known bearer token.
// Without tokens the coordinator only listens on loopback, and every caller
// from a loopback or unix-socket address is an admin named "loopback";
// anybody else is refused (belt and braces: the listeners already refuse
// non-loopback addresses in that mode).
type Authenticator struct {
	Tokens *Tokens
}

// LoopbackOnly reports whether a runs without tokens.
func (a Authenticator) LoopbackOnly() bool { return a.Tokens == nil }

// Authenticate returns the identity for a request carrying the given
// Authorization header value (empty when absent) from peer.
func (a Authenticator) Authenticate(authorization string, peer net.Addr) (Identity, error) {
	if a.Tokens == nil {
		if IsLoopbackAddr(peer) {
			return Identity{Name: "loopback", Role: RoleAdmin}, nil
		}
		return Identity{}, fmt.Errorf("%w: this coordinator has no tokens file and serves loopback callers only", ErrUnauthenticated)
	}
	token, ok := BearerToken(authorization)
	if !ok {
		return Identity{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	id, ok := a.Tokens.lookup(token)
	if !ok {
		return Identity{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	return id, nil
}

// Authorize checks that id may do something needing role need.
func Authorize(id Identity, need Role) error {
	if id.Role < need {
		return fmt.Errorf("%w: %s (role %s) needs role %s", ErrPermissionDenied, id.Name, id.Role, need)
	}
	return nil
}

// BearerToken extracts the token from an "Authorization: Bearer TOKEN"
// value (scheme case-insensitive).
func BearerToken(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// IsLoopbackAddr reports whether addr is a loopback TCP/UDP address or a
// unix socket.
func IsLoopbackAddr(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	case nil:
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
