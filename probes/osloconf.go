package probes

// Reading an OpenStack service's own rendered config (nova.conf, ...) the way
// oslo.config reads it (package osloconf, which the reload's syntax check
// uses too), and its transport_url the way oslo.messaging parses it. Written
// here because no Go package reads oslo.messaging's multi-host URL, which
// net/url rejects ("user:pass@h1:5672,user:pass@h2:5672").

import (
	"fmt"
	"github.com/kolla-agent/kolla-agent/redact"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kolla-agent/kolla-agent/osloconf"
)

// osloConf is one parsed oslo.config file, as the rpc check reads it.
type osloConf struct {
	f *osloconf.File
}

// readOsloConf reads and parses file.
func readOsloConf(file string) (*osloConf, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err // *PathError names the file
	}
	return parseOsloConf(file, data)
}

// OsloSource is one of a service's --config-file (a file) or --config-dir
// (a directory whose *.conf files are read in name order) arguments.
type OsloSource struct {
	Path string
	Dir  bool
}

// OsloSources takes a service's oslo config arguments from its command
// line, in their order: --config-file and --config-dir, each as two words
// or joined by "=". As argparse, a word starting with "-" is no option's
// value; an empty value names nothing.
func OsloSources(argv []string) []OsloSource {
	var out []OsloSource
	for i := 0; i < len(argv); i++ {
		for _, opt := range []string{"--config-file", "--config-dir"} {
			var v string
			switch {
			case argv[i] == opt:
				if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
					i++
					v = argv[i]
				}
			case strings.HasPrefix(argv[i], opt+"="):
				v = strings.TrimPrefix(argv[i], opt+"=")
			default:
				continue
			}
			if v != "" {
				out = append(out, OsloSource{Path: v, Dir: opt == "--config-dir"})
			}
			break
		}
	}
	return out
}

// OsloSourcesOf is what a service started as argv reads: its own
// --config-file and --config-dir arguments (OsloSources), and where one
// kind is not given, oslo.config's defaults for it: for NAME the project
// and then the program (nova, then nova-conductor), the first of
// /etc/PROJECT/NAME.conf and /etc/NAME.conf that exists, and likewise the
// NAME.conf.d directories. The project is the program's name up to its
// first "-", as OpenStack's services are named. The user's ~/.PROJECT and
// ~ are not searched: a container's service user keeps no config there.
// exists is asked with paths as the service sees them.
func OsloSourcesOf(argv []string, exists func(path string, dir bool) bool) []OsloSource {
	own := OsloSources(argv)
	var hasFile, hasDir bool
	for _, s := range own {
		hasFile, hasDir = hasFile || !s.Dir, hasDir || s.Dir
	}
	if len(argv) == 0 || (hasFile && hasDir) {
		return own
	}
	prog := filepath.Base(argv[0])
	if strings.HasPrefix(prog, "python") && len(argv) > 1 && !strings.HasPrefix(argv[1], "-") {
		prog = filepath.Base(argv[1]) // python3 /usr/bin/nova-conductor
	}
	project, _, _ := strings.Cut(prog, "-")
	names := []string{project}
	if prog != project {
		names = append(names, prog)
	}
	first := func(name string, dir bool) (OsloSource, bool) {
		for _, p := range []string{filepath.Join("/etc", project, name), filepath.Join("/etc", name)} {
			if exists(p, dir) {
				return OsloSource{Path: p, Dir: dir}, true
			}
		}
		return OsloSource{}, false
	}
	var files, dirs []OsloSource
	for _, n := range names {
		if f, ok := first(n+".conf", false); ok && !hasFile {
			files = append(files, f)
		}
		if d, ok := first(n+".conf.d", true); ok && !hasDir {
			dirs = append(dirs, d)
		}
	}
	// oslo.config reads the files, then the directories; a given kind
	// keeps its place in the command line's order.
	if hasFile {
		return append(own, dirs...)
	}
	return append(append(files, own...), dirs...)
}

// readOsloConfs reads sources as oslo.config does, in order, each
// directory's *.conf sorted by name, and merges them: a later file's value
// wins. A directory that does not exist is an error, as for oslo.config.
func readOsloConfs(sources []OsloSource) (*osloConf, error) {
	var files []*osloconf.File
	for _, s := range sources {
		paths := []string{s.Path}
		if s.Dir {
			ents, err := os.ReadDir(s.Path)
			if err != nil {
				return nil, fmt.Errorf("config dir: %w", err)
			}
			paths = nil
			for _, e := range ents { // sorted by name
				if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
					paths = append(paths, filepath.Join(s.Path, e.Name()))
				}
			}
		}
		for _, p := range paths {
			c, err := readOsloConf(p)
			if err != nil {
				return nil, err
			}
			files = append(files, c.f)
		}
	}
	if len(files) == 1 {
		return &osloConf{f: files[0]}, nil
	}
	return &osloConf{f: osloconf.Merge(files...)}, nil
}

// parseOsloConf parses data, the content of file, as oslo.config does (see
// osloconf.Parse). Errors carry file:line and never an option's value.
func parseOsloConf(file string, data []byte) (*osloConf, error) {
	f, err := osloconf.Parse(file, data)
	if err != nil {
		return nil, err
	}
	return &osloConf{f: f}, nil
}

// get returns a key's value after oslo.config's template substitution, and
// whether it is set. section is matched as oslo.config matches group names.
func (c *osloConf) get(section, key string) (string, bool) {
	v, _, ok := c.f.Substituted(section, key)
	return v, ok
}

// where names a key for an error message: "file:line: [section] key" when
// the key is set, "file: [section] key" when it is not.
func (c *osloConf) where(section, key string) string {
	if file, line, ok := c.f.Where(section, key); ok {
		return fmt.Sprintf("%s:%d: [%s] %s", file, line, section, key)
	}
	return fmt.Sprintf("%s: [%s] %s", c.f.Name, section, key)
}

// parseOsloBool parses a BoolOpt value as oslo.config's types.Boolean does.
func parseOsloBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "on", "yes":
		return true, nil
	case "false", "0", "off", "no":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean %q (want true or false)", s)
}

// transportURL is a parsed oslo.messaging transport URL for the rabbit
// driver.
type transportURL struct {
	hosts []amqpHost
	vhost string            // "/" when the URL has none
	query map[string]string // option overrides: [oslo_messaging_rabbit] name -> value
}

// amqpHost is one broker of a transport URL.
type amqpHost struct {
	host     string // name or IP, without brackets
	port     int
	user     string
	password string
}

func (h amqpHost) addr() string { return net.JoinHostPort(h.host, strconv.Itoa(h.port)) }

// parseTransportURL parses rabbit://user:pass@host:port[,user:pass@host:port]/vhost?query
// the way oslo.messaging's TransportURL.parse and its rabbit driver read it:
// hosts in the order given, credentials percent-decoded per host, port 5672
// by default, an empty vhost meaning the default vhost "/", no host at all
// meaning guest:guest@localhost. Errors show the URL redacted and never echo
// a part of it that could be a misplaced password.
func parseTransportURL(raw string) (*transportURL, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("transport URL %s: %s", redact.URL(raw), fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || !isURLScheme(scheme) {
		return nil, fail("no scheme (want rabbit://)")
	}
	switch strings.ToLower(scheme) {
	case "rabbit", "kombu+rabbit":
	default:
		return nil, fail("scheme %q is not supported: the rpc check speaks AMQP 0-9-1 to RabbitMQ (rabbit://)", strings.ToLower(scheme))
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	rawQuery := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, rawQuery = rest[:i], rest[i+1:]
	}
	if !strings.HasPrefix(rest, "//") {
		return nil, fail("no '//' after the scheme")
	}
	netloc, path := rest[2:], ""
	if i := strings.IndexByte(netloc, '/'); i >= 0 {
		netloc, path = netloc[:i], netloc[i:]
	}
	u := &transportURL{vhost: "/", query: map[string]string{}}
	if path != "" && path != "/" {
		u.vhost = unquoteLenient(path[1:])
	}
	if rawQuery != "" {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return nil, fail("invalid query string")
		}
		for k, vs := range q {
			u.query[k] = strings.Join(vs, ",")
		}
	}
	n := 0
	for _, part := range strings.Split(netloc, ",") {
		if part == "" {
			continue
		}
		n++
		h, err := parseTransportHost(part)
		if err != nil {
			return nil, fail("host %d: %v", n, err)
		}
		u.hosts = append(u.hosts, h)
	}
	if len(u.hosts) == 0 {
		u.hosts = []amqpHost{{host: "localhost", port: 5672, user: "guest", password: "guest"}}
	}
	return u, nil
}

func parseTransportHost(part string) (amqpHost, error) {
	h := amqpHost{port: 5672}
	hostport := part
	if i := strings.LastIndexByte(part, '@'); i >= 0 {
		userinfo := part[:i]
		hostport = part[i+1:]
		user, pass, _ := strings.Cut(userinfo, ":")
		h.user, h.password = unquoteLenient(user), unquoteLenient(pass)
	}
	var port string
	switch {
	case strings.HasPrefix(hostport, "["):
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return h, fmt.Errorf("invalid IPv6 address (no ']')")
		}
		h.host = hostport[1:end]
		if tail := hostport[end+1:]; tail != "" {
			if tail[0] != ':' {
				return h, fmt.Errorf("unexpected text after ']'")
			}
			port = tail[1:]
		}
	default:
		h.host, port, _ = strings.Cut(hostport, ":")
	}
	if h.host == "" {
		return h, fmt.Errorf("no host name")
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return h, fmt.Errorf("invalid port (want 1-65535)")
		}
		h.port = p
	}
	return h, nil
}

func isURLScheme(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// unquoteLenient decodes %XX escapes as Python's urllib.parse.unquote does:
// an invalid escape is kept as written, '+' stays '+'.
func unquoteLenient(s string) string {
	if !strings.ContainsRune(s, '%') {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if hi, ok1 := unhex(s[i+1]); ok1 {
				if lo, ok2 := unhex(s[i+2]); ok2 {
					b = append(b, hi<<4|lo)
					i += 2
					continue
				}
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
