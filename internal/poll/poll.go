// Package poll is the tests' one way to wait for a condition: look again
// every few milliseconds until it holds, or fail the test when the time is
// up. Synchronisation without fixed sleeps.
package poll

import (
	"testing"
	"time"
)

// Until looks at cond every 10 ms until it holds; after within, the test
// fails, saying what it waited for.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
