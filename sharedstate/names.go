package sharedstate

import (
	"errors"
	"fmt"
)

const (
	// DefaultMaxDependencies is the default cap on the number of dependencies
	// one Engine tracks (EngineConfig.MaxDependencies).
	DefaultMaxDependencies = 10000

	// MaxDependencyNameLen is the longest valid dependency name, in bytes.
	MaxDependencyNameLen = 128

	// DefaultPolicyName is the reserved name under which the fleet default
	// policy is stored (policies/_default). It is not a valid dependency name.
	DefaultPolicyName = "_default"
)

var (
	// ErrInvalidDependencyName is wrapped by every error that refuses a
	// dependency name.
	ErrInvalidDependencyName = errors.New("fusebox: invalid dependency name")

	// ErrTooManyDependencies is matched (errors.Is) by *TooManyDependenciesError.
	ErrTooManyDependencies = errors.New("fusebox: too many dependencies")
)

// TooManyDependenciesError is returned when an Engine already tracks its
// maximum number of dependencies and is asked about a new one. It matches
// ErrTooManyDependencies with errors.Is.
type TooManyDependenciesError struct {
	Dependency string // the refused name
	Limit      int    // EngineConfig.MaxDependencies
}

func (e *TooManyDependenciesError) Error() string {
	return fmt.Sprintf("fusebox: too many dependencies: limit %d reached, refusing %q", e.Limit, e.Dependency)
}

// Is reports whether target is ErrTooManyDependencies.
func (e *TooManyDependenciesError) Is(target error) bool { return target == ErrTooManyDependencies }

// ValidateDependencyName checks that name is 1–128 characters of
// [A-Za-z0-9._:/-] and is not the reserved DefaultPolicyName. The returned
// error wraps ErrInvalidDependencyName.
func ValidateDependencyName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidDependencyName)
	}
	if len(name) > MaxDependencyNameLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidDependencyName, len(name), MaxDependencyNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: %q: character %q at offset %d is not one of [A-Za-z0-9._:/-]",
				ErrInvalidDependencyName, name, name[i], i)
		}
	}
	if name == DefaultPolicyName {
		return fmt.Errorf("%w: %q is reserved for the default policy", ErrInvalidDependencyName, name)
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '/', c == '-':
		return true
	}
	return false
}

// HostDependencyName is the dependency name of calls to an upstream
// host[:port] that nobody named: the host[:port] as written, every byte
// outside [A-Za-z0-9._:/-] replaced by '_', cut to MaxDependencyNameLen;
// "unknown-host" for "". clientlib's RoundTripper and the agent's egress
// proxy both name calls this way, so that their callers of one upstream
// share one breaker.
func HostDependencyName(hostport string) string {
	if hostport == "" {
		return "unknown-host"
	}
	if len(hostport) > MaxDependencyNameLen {
		hostport = hostport[:MaxDependencyNameLen]
	}
	for i := 0; i < len(hostport); i++ {
		if !nameByte(hostport[i]) {
			b := []byte(hostport)
			for j := i; j < len(b); j++ {
				if !nameByte(b[j]) {
					b[j] = '_'
				}
			}
			return string(b)
		}
	}
	return hostport
}
