package probes

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the test binary as a helper process when asked (see
// runTestHelper), and otherwise the tests, failing on leaked goroutines;
// the RabbitMQ broker the rpc tests start once (lazily) is stopped last.
func TestMain(m *testing.M) {
	if mode := os.Getenv(testHelperEnv); mode != "" {
		os.Exit(runTestHelper(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if err := stopRPCBroker(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
		os.Exit(code)
	}))
}
