package integration

import (
	"os"
	"testing"
)

// sideBySide lets a test that mostly waits (on sessions, elections,
// transaction timeouts and rebalances, with a core idle much of the time)
// run beside others of its kind: go test runs them after the serial tests,
// up to -parallel at once (make integration passes 3). Such a test asserts
// no rate or latency, uses no network namespace and sets no process-wide
// environment; each starts its own cluster on ports of its own.
// SLUICE_IT_SERIAL=1 runs them one at a time again.
func sideBySide(t *testing.T) {
	if os.Getenv("SLUICE_IT_SERIAL") == "" {
		t.Parallel()
	}
}
