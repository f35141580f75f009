package bootstrap

import (
	"flag"
	"os"
	"testing"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

var env *testenv.Env

// TestMain starts one control plane for the package's API tests, but not
// for fuzzing: the fuzz targets are pure, and every fuzz worker process
// runs TestMain too.
func TestMain(m *testing.M) {
	flag.Parse()
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			os.Exit(m.Run())
		}
	}
	testenv.Main(m, func(e *testenv.Env) { env = e })
}
