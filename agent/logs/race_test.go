//go:build race

package logs

import "time"

// rotateEvery is how often the logrotate tests rotate. Under the race
// detector the shipper runs several times slower, and with copytruncate
// and delaycompress a shipper more than one rotation behind finds the copy
// of its file's unread end already compressed (compressed files are not
// read): the loss the test counts would be the race build's pace, not the
// shipper's. Four times the interval keeps it within a rotation.
const rotateEvery = 400 * time.Millisecond
