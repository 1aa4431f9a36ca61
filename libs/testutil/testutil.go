// Package testutil holds helpers shared by Sluice's tests: free loopback
// ports, polling a condition with a deadline (never a bare sleep), and
// goroutine leak checks.
package testutil

import (
	"fmt"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ports := FreePorts(t, 1)
	return ports[0]
}

// FreePorts returns n distinct free ports. All listeners are held open until
// every port is chosen, so the ports are distinct.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freePorts(n)
	if err != nil {
		t.Fatalf("finding free ports: %v", err)
	}
	return ports
}

func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close() // only used to reserve the port
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listening on 127.0.0.1:0: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
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
