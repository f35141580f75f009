package probes

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the test binary as a helper process when asked (see
// runTestHelper), and otherwise the tests, failing on leaked goroutines.
func TestMain(m *testing.M) {
	if mode := os.Getenv(testHelperEnv); mode != "" {
		os.Exit(runTestHelper(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}
