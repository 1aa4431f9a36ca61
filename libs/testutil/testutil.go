// Package testutil holds helpers shared by Sluice's tests: free loopback
// ports, polling a condition with a deadline (never a bare sleep), and
// goroutine leak checks.
package testutil

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/libs/devcluster"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts returns n distinct free ports.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := devcluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// Eventually polls cond every interval until it returns nil or timeout
// passes, then fails the test with the last error.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() error) {
	t.Helper()
	if err := Await(timeout, interval, cond); err != nil {
		t.Fatal(err)
	}
}

// Await polls cond until it returns nil or timeout passes, and returns the
// last error (wrapped with the timeout) if it never succeeded.
func Await(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %v: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// VerifyNoLeaks is for TestMain: it runs the tests and then fails if
// goroutines are left running.
func VerifyNoLeaks(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, opts...)
}
