package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// hostState is what a node changes on the machine and `down` must put back:
// the sysctls the kubelet, kube-proxy and the node's network set, the
// iptables rules, mounts, network links and namespaces, cgroups and the
// well-known directories the kubelet and CNI create whatever their root.
type hostState struct {
	Sysctls  map[string]string `json:"sysctls"`
	Iptables map[string]string `json:"iptables"` // command -> iptables-save output
	Mounts   []string          `json:"mounts"`
	Links    []string          `json:"links"`
	Cgroups  []string          `json:"cgroups"` // hierarchy/top-level dir
	Paths    map[string]bool   `json:"paths"`   // path -> existed
}

// hostSysctls are read before the node starts and written back by down.
// The kubelet sets the first six (its kernel tunables), the node's network
// the others.
func hostSysctls() []string {
	return []string{
		"kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
		"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
		"net.ipv4.ip_forward", "net.ipv4.conf.all.forwarding", "net.ipv4.conf.default.forwarding",
		"net.ipv4.conf.all.route_localnet", "net.bridge.bridge-nf-call-iptables",
		"net.bridge.bridge-nf-call-ip6tables", "net.netfilter.nf_conntrack_max",
		"net.netfilter.nf_conntrack_tcp_timeout_established", "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
	}
}

// hostPaths are created by the kubelet, containerd or the CNI plugins in
// fixed places, whatever root directories they are given.
func hostPaths() []string {
	return []string{
		"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/netns",
		"/etc/cni", "/opt/cni", "/run/containerd", "/var/lib/containerd", "/etc/kubernetes",
		"/run/kubernetes",
	}
}

func iptablesCommands() []string { return []string{"iptables", "ip6tables"} }

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// snapshotHost reads the host's state.
func snapshotHost() (hostState, error) {
	s := hostState{Sysctls: map[string]string{}, Iptables: map[string]string{}, Paths: map[string]bool{}}
	for _, name := range hostSysctls() {
		if b, err := os.ReadFile(sysctlPath(name)); err == nil {
			s.Sysctls[name] = strings.TrimSpace(string(b))
		}
	}
	var errs []error
	for _, cmd := range iptablesCommands() {
		out, err := exec.Command(cmd + "-save").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s-save: %w", cmd, err))
			continue
		}
		s.Iptables[cmd] = string(out)
	}
	var err error
	if s.Mounts, err = mountPoints(); err != nil {
		errs = append(errs, err)
	}
	if s.Links, err = linkNames(); err != nil {
		errs = append(errs, err)
	}
	s.Cgroups = topCgroups()
	for _, p := range hostPaths() {
		_, err := os.Lstat(p)
		s.Paths[p] = err == nil
	}
	return s, errors.Join(errs...)
}

func mountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, unescapeMount(f[4]))
		}
	}
	return out, nil
}

// mountEscape is mountinfo's octal escape; ruleCounters the packet and
// byte counters iptables-save -c puts before a rule.
var (
	mountEscape  = regexp.MustCompile(`\\[0-7]{3}`)
	ruleCounters = regexp.MustCompile(`^\[\d+:\d+\] `)
)

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	return mountEscape.ReplaceAllStringFunc(s, func(m string) string {
		var c byte
		for _, d := range m[1:] {
			c = c*8 + byte(d-'0')
		}
		return string(c)
	})
}

func linkNames() ([]string, error) {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip link: %w", err)
	}
	var names []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// topCgroups lists the top-level directories of every cgroup hierarchy
// (kubepods, kubepods.slice, ... when a node ran).
func topCgroups() []string {
	var out []string
	roots := []string{"/sys/fs/cgroup"}
	if entries, err := os.ReadDir("/sys/fs/cgroup"); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", e.Name(), "cgroup.procs")); err == nil {
					roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
				}
			}
		}
	}
	for _, root := range roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() && !slices.Contains(roots, filepath.Join(root, e.Name())) {
				out = append(out, filepath.Join(root, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}

// normalizeIptables drops comments and counters and the tables that hold
// nothing but empty built-in chains with an ACCEPT policy (iptables-nft
// shows a table once anything touched it, even after it was emptied).
func normalizeIptables(save string) string {
	var out []string
	var table []string
	empty := true
	flush := func() {
		if len(table) > 0 && !empty {
			out = append(out, table...)
		}
		table, empty = nil, true
	}
	sc := bufio.NewScanner(strings.NewReader(save))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, "*"):
			flush()
			table = append(table, l)
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l)
			l = f[0] + " " + f[1]
			if !builtinChain(strings.TrimPrefix(f[0], ":")) || f[1] != "ACCEPT" {
				empty = false
			}
			table = append(table, l)
		case l == "COMMIT":
			table = append(table, l)
			flush()
		default:
			empty = false
			table = append(table, ruleCounters.ReplaceAllString(l, ""))
		}
	}
	flush()
	return strings.Join(out, "\n")
}

func builtinChain(name string) bool {
	return slices.Contains([]string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}, name)
}

// diff names what differs between two snapshots, one line a difference;
// empty when they agree.
func (s hostState) diff(after hostState) []string {
	var d []string
	for _, name := range hostSysctls() {
		if s.Sysctls[name] != after.Sysctls[name] {
			d = append(d, fmt.Sprintf("sysctl %s: %q before, %q after", name, s.Sysctls[name], after.Sysctls[name]))
		}
	}
	for _, cmd := range iptablesCommands() {
		if a, b := normalizeIptables(s.Iptables[cmd]), normalizeIptables(after.Iptables[cmd]); a != b {
			d = append(d, fmt.Sprintf("%s rules differ:\nbefore:\n%s\nafter:\n%s", cmd, a, b))
		}
	}
	d = append(d, setDiff("mount", s.Mounts, after.Mounts)...)
	d = append(d, setDiff("network link", s.Links, after.Links)...)
	d = append(d, setDiff("cgroup", s.Cgroups, after.Cgroups)...)
	for _, p := range hostPaths() {
		if s.Paths[p] != after.Paths[p] {
			d = append(d, fmt.Sprintf("path %s: existed %t before, %t after", p, s.Paths[p], after.Paths[p]))
		}
	}
	return d
}

func setDiff(what string, before, after []string) []string {
	var d []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			d = append(d, fmt.Sprintf("%s %s is new", what, a))
		}
	}
	for _, b := range before {
		if !slices.Contains(after, b) {
			d = append(d, fmt.Sprintf("%s %s is gone", what, b))
		}
	}
	return d
}

// restoreHost puts back what a node changed since before was taken: it
// kills what runs in new cgroups, unmounts new mounts, deletes new links,
// restores the iptables rules and sysctls, removes new cgroups and the
// paths that did not exist. It goes on after an error and returns them all.
func restoreHost(before hostState) error {
	now, err := snapshotHost()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, cg := range now.Cgroups {
		if !slices.Contains(before.Cgroups, cg) {
			killCgroup(cg)
		}
	}
	// Deepest first, so a mount under another goes before it.
	mounts := slices.Clone(now.Mounts)
	slices.Reverse(mounts)
	for _, m := range mounts {
		if !slices.Contains(before.Mounts, m) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	for _, l := range now.Links {
		if !slices.Contains(before.Links, l) {
			if out, err := exec.Command("ip", "link", "delete", l).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("Cannot find device")) {
				errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", l, err, out))
			}
		}
	}
	for _, cmd := range iptablesCommands() {
		if err := restoreIptables(cmd, before.Iptables[cmd], now.Iptables[cmd]); err != nil {
			errs = append(errs, err)
		}
	}
	// ip_forward first: writing it resets every interface's forwarding.
	for _, name := range hostSysctls() {
		if v, ok := before.Sysctls[name]; ok && now.Sysctls[name] != v {
			if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", name, v, err))
			}
		}
	}
	for _, cg := range now.Cgroups {
		if !slices.Contains(before.Cgroups, cg) {
			if err := removeCgroup(cg); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range hostPaths() {
		if !before.Paths[p] && now.Paths[p] {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// restoreIptables empties every table the current rules use, then loads
// the rules saved before.
func restoreIptables(cmd, before, now string) error {
	for l := range strings.SplitSeq(now, "\n") {
		table, ok := strings.CutPrefix(strings.TrimSpace(l), "*")
		if !ok {
			continue
		}
		for _, args := range [][]string{{"-F"}, {"-X"}} {
			if out, err := exec.Command(cmd, append([]string{"-w", "-t", table}, args...)...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s -t %s %s: %v: %s", cmd, table, args[0], err, out)
			}
		}
		for _, chain := range []string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"} {
			// Not every table has every chain; a policy only matters where it does.
			_ = exec.Command(cmd, "-w", "-t", table, "-P", chain, "ACCEPT").Run()
		}
	}
	if strings.TrimSpace(before) == "" {
		return nil
	}
	c := exec.Command(cmd+"-restore", "-w")
	c.Stdin = strings.NewReader(before)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("%s-restore: %v: %s", cmd, err, out)
	}
	return nil
}

// killCgroup kills every process in the cgroup tree at dir.
func killCgroup(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for f := range strings.FieldsSeq(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		return nil
	})
}

// removeCgroup removes a cgroup tree, leaves first. A cgroup whose last
// process has just been killed can take a moment to become removable.
func removeCgroup(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	var last error
	for range 50 {
		last = nil
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				last = fmt.Errorf("remove cgroup %s: %w", d, err)
			}
		}
		if last == nil {
			return nil
		}
		killCgroup(dir)
		sleepBrief()
	}
	return last
}

func writeHostState(path string, s hostState) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

func readHostState(path string) (hostState, error) {
	var s hostState
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}
