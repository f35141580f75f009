// Package atomicwriter updates directories in tests exactly as the kubelet
// updates a ConfigMap volume: it drives kubelet-atomic-writer, a small tool
// around the kubelet's own AtomicWriter (k8s.io/kubernetes pkg/volume/util,
// at the version hack/install-tools.sh pins) that hack/install-tools.sh
// builds into the same bin directory as kube-apiserver.
//
// The layout it produces is the kubelet's: the files live in a hidden
// timestamped directory (dir/..2006_01_02_15_04_05.N), dir/..data is a
// symlink to it, and each top-level key is a symlink key -> ..data/key. An
// update writes a new timestamped directory, renames a new ..data symlink
// over the old one (the atomic step), adds and removes the top-level
// symlinks, and deletes the old timestamped directory.
package atomicwriter

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// Tool is the name of the binary in testenv.BinDir.
const Tool = "kubelet-atomic-writer"

// DefaultMode is the file mode Write uses: the API's default for a ConfigMap
// volume's defaultMode.
const DefaultMode os.FileMode = 0o644

// stopWait bounds how long the cleanup waits for the tool to exit at EOF
// before killing it.
const stopWait = 10 * time.Second

// Writer is a running kubelet-atomic-writer. Its methods may be called from
// any goroutine; requests are served one at a time.
type Writer struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	answer *bufio.Reader
	stderr *tail
	broken error // set once the protocol is out of step; every later call fails with it
}

// request is one line of the tool's protocol.
type request struct {
	Dir   string            `json:"dir"`
	Files map[string]string `json:"files"`
	Mode  *int32            `json:"mode,omitempty"`
}

// Start starts kubelet-atomic-writer and stops it when the test ends. It
// fails the test if the tool is not installed (run hack/install-tools.sh).
func Start(t testing.TB) *Writer {
	t.Helper()
	w, err := start(filepath.Join(testenv.BinDir(), Tool))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.stop(); err != nil {
			t.Error(err)
		}
	})
	return w
}

func start(path string) (*Writer, error) {
	if _, err := exec.LookPath(path); err != nil {
		return nil, fmt.Errorf("atomicwriter: %s is not installed in %s (run hack/install-tools.sh): %w", Tool, filepath.Dir(path), err)
	}
	cmd := exec.Command(path)
	// Killed with the test binary if it crashes before the cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("atomicwriter: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("atomicwriter: %w", err)
	}
	w := &Writer{cmd: cmd, stdin: stdin, answer: bufio.NewReader(stdout), stderr: &tail{max: 4 << 10}}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("atomicwriter: start %s: %w", path, err)
	}
	return w, nil
}

// Write replaces the contents of dir, an absolute path, with files (key to
// content, mode DefaultMode), as the kubelet does when the ConfigMap behind a
// volume changes; dir is created (mode 0777, as the kubelet's emptyDir
// wrapper makes it) if missing. It returns once the tool has finished; an
// error from the AtomicWriter (an invalid key, say) comes back as an error
// and the Writer stays usable.
func (w *Writer) Write(dir string, files map[string]string) error {
	return w.WriteMode(dir, files, DefaultMode)
}

// WriteMode is Write with every file's mode set to mode (the volume's
// defaultMode), at most 0777.
func (w *Writer) WriteMode(dir string, files map[string]string, mode os.FileMode) error {
	if mode&^os.ModePerm != 0 {
		return fmt.Errorf("atomicwriter: mode %v has bits other than permissions", mode)
	}
	m := int32(mode)
	if files == nil {
		files = map[string]string{}
	}
	line, err := json.Marshal(request{Dir: dir, Files: files, Mode: &m})
	if err != nil {
		return fmt.Errorf("atomicwriter: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != nil {
		return w.broken
	}
	answer, err := w.roundTrip(append(line, '\n'))
	if err != nil {
		w.broken = fmt.Errorf("atomicwriter: %w%s", err, w.stderr.describe())
		return w.broken
	}
	if answer == "ok" {
		return nil
	}
	if msg, ok := strings.CutPrefix(answer, "error: "); ok {
		return fmt.Errorf("atomicwriter: write %s: %s", dir, msg)
	}
	w.broken = fmt.Errorf("atomicwriter: unexpected answer %q", answer)
	return w.broken
}

func (w *Writer) roundTrip(line []byte) (string, error) {
	if _, err := w.stdin.Write(line); err != nil {
		return "", fmt.Errorf("send request: %w", err)
	}
	answer, err := w.answer.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read answer: %w", err)
	}
	return strings.TrimSuffix(answer, "\n"), nil
}

// stop closes the tool's stdin, on which it exits, and waits for it; it is
// killed if it does not exit in stopWait.
func (w *Writer) stop() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken == nil {
		w.broken = errors.New("atomicwriter: used after the test ended")
	}
	w.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("atomicwriter: %s: %w%s", Tool, err, w.stderr.describe())
		}
		return nil
	case <-time.After(stopWait):
		w.cmd.Process.Kill()
		<-done
		return fmt.Errorf("atomicwriter: %s did not exit %v after its stdin closed; killed%s", Tool, stopWait, w.stderr.describe())
	}
}

// tail keeps the last max bytes written to it: the tool's stderr (klog), for
// error messages.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// describe returns the kept stderr as a suffix for an error message, or "".
func (t *tail) describe() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "; its stderr ends:\n" + s
}
