//go:build race

package deploy_test

// raceEnabled: the test binary was built with -race (see binaryPath).
const raceEnabled = true
