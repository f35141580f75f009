package probes

import (
	"os"
	"syscall"
)

// OSSpawner starts processes with os.StartProcess and waits for each in a
// goroutine of its own. It is right wherever the agent is not the reaper of
// its children (sidecar mode, exec'd service, tests).
type OSSpawner struct{}

// Start implements Spawner.
func (OSSpawner) Start(argv []string, attr *os.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	p, err := os.StartProcess(argv[0], argv, attr)
	if err != nil {
		return 0, nil, err
	}
	done := make(chan syscall.WaitStatus, 1)
	go func() {
		st, err := p.Wait()
		var ws syscall.WaitStatus
		if err == nil {
			ws, _ = st.Sys().(syscall.WaitStatus)
		} else {
			ws = syscall.WaitStatus(0xff00) // exited 255: the status was lost
		}
		done <- ws
	}()
	return p.Pid, done, nil
}
