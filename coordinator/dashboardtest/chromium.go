package dashboardtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

const (
	// SkipEnv set to "1" skips every browser test.
	SkipEnv = "FUSEBOX_SKIP_BROWSER"
	// ChromiumEnv names the Chromium binary, before PATH is searched.
	ChromiumEnv = "FUSEBOX_CHROMIUM"
)

// PathNames are the names looked up on PATH, in order.
var PathNames = []string{"chromium", "chromium-browser"}

// ErrNoChromium is the error of Lookup when no Chromium was found.
var ErrNoChromium = errors.New("dashboardtest: no Chromium")

// Chromium returns the Chromium binary for a browser test, skips t when
// FUSEBOX_SKIP_BROWSER=1, and fails t naming the fix when there is none
// (see the package documentation for the order).
func Chromium(t testing.TB) string {
	t.Helper()
	path, skip, err := Lookup(os.Getenv, exec.LookPath)
	switch {
	case skip:
		t.Skipf("%s=1: browser test skipped", SkipEnv)
	case err != nil:
		t.Fatal(err)
	}
	return path
}

// Lookup is Chromium's decision with the environment and PATH passed in:
// skip when FUSEBOX_SKIP_BROWSER is "1", else the binary, else an error
// wrapping ErrNoChromium that says how to get one.
func Lookup(getenv func(string) string, lookPath func(string) (string, error)) (path string, skip bool, err error) {
	if getenv(SkipEnv) == "1" {
		return "", true, nil
	}
	if p := getenv(ChromiumEnv); p != "" {
		found, err := lookPath(p) // a path with a slash: checked to be an executable file
		if err != nil {
			return "", false, fmt.Errorf("%w: %s=%s: %v (point it at a Chromium binary, or unset it to search PATH for %v)",
				ErrNoChromium, ChromiumEnv, p, err, PathNames)
		}
		return found, false, nil
	}
	for _, name := range PathNames {
		if found, err := lookPath(name); err == nil {
			return found, false, nil
		}
	}
	return "", false, fmt.Errorf("%w on PATH (looked for %v): `make test` installs Debian's chromium when missing "+
		"(or: apt-get install chromium); %s=/path/to/chromium names another binary; %s=1 skips the browser tests",
		ErrNoChromium, PathNames, ChromiumEnv, SkipEnv)
}
