package bootstrap

import (
	"testing"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, func(e *testenv.Env) { env = e }) }
