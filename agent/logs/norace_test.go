//go:build !race

package logs

import "time"

// rotateEvery is how often the logrotate tests rotate (race_test.go says
// why the race build rotates less often).
const rotateEvery = 100 * time.Millisecond
