package probes

// Reading an OpenStack service's own rendered config (nova.conf, ...) the way
// oslo.config reads it, and its transport_url the way oslo.messaging parses
// it. Written here because no Go package reads oslo.config's dialect of INI
// (continuation lines, `$name` substitution, DEFAULT's case-sensitive name)
// or oslo.messaging's multi-host URL, which net/url rejects
// ("user:pass@h1:5672,user:pass@h2:5672").

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// osloConf is one parsed oslo.config file.
type osloConf struct {
	file     string
	sections map[string]map[string]osloValue // normalised section name -> key
}

// osloValue is the last assignment of a key; line is where its key was.
type osloValue struct {
	value string
	line  int
}

// readOsloConf reads and parses file.
func readOsloConf(file string) (*osloConf, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err // *PathError names the file
	}
	return parseOsloConf(file, data)
}

// parseOsloConf parses data as oslo.config does (oslo_config/iniparser.py):
//   - trailing whitespace is ignored; a blank line ends a multi-line value;
//   - a line starting with a space or tab continues the previous value
//     (lines joined with "\n");
//   - "[name]" starts a section; lines starting with '#' or ';' are comments;
//   - "key = value" or "key: value", whichever separator comes first; one
//     pair of matching quotes around the value is removed;
//   - keys are case-sensitive; section names other than DEFAULT are not;
//   - the last assignment of a key wins.
//
// Errors carry file:line and never the line itself, which may hold a
// password.
func parseOsloConf(file string, data []byte) (*osloConf, error) {
	c := &osloConf{file: file, sections: map[string]map[string]osloValue{}}
	var (
		section  string
		inSect   bool
		key      string
		keyLine  int
		value    []string
		hasKey   bool
		lineno   int
		flushKey = func() {
			if !hasKey {
				return
			}
			c.sections[section][key] = osloValue{value: strings.Join(value, "\n"), line: keyLine}
			hasKey, key, value = false, "", nil
		}
	)
	errAt := func(n int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", file, n, fmt.Sprintf(format, args...))
	}
	for _, raw := range strings.Split(string(data), "\n") {
		lineno++
		line := strings.TrimRightFunc(raw, unicode.IsSpace)
		switch {
		case line == "":
			flushKey()
			continue
		case line[0] == ' ' || line[0] == '\t':
			if !hasKey {
				return nil, errAt(lineno, "unexpected continuation line")
			}
			value = append(value, strings.TrimLeftFunc(line, unicode.IsSpace))
			continue
		}
		flushKey()
		switch {
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				return nil, errAt(lineno, "invalid section (must end with ])")
			}
			if len(line) <= 2 {
				return nil, errAt(lineno, "empty section name")
			}
			section, inSect = normalizeOsloSection(line[1:len(line)-1]), true
			if c.sections[section] == nil {
				c.sections[section] = map[string]osloValue{}
			}
		case line[0] == '#' || line[0] == ';':
			// comment
		default:
			k, v, ok := splitOsloAssignment(line)
			if !ok {
				return nil, errAt(lineno, "no ':' or '=' found in assignment")
			}
			if k == "" {
				return nil, errAt(lineno, "key cannot be empty")
			}
			if !inSect {
				return nil, errAt(lineno, "assignment before any [section]")
			}
			key, keyLine, value, hasKey = k, lineno, []string{v}, true
		}
	}
	flushKey()
	return c, nil
}

// normalizeOsloSection is oslo.config's group-name rule: DEFAULT is matched
// exactly, every other section name case-insensitively.
func normalizeOsloSection(name string) string {
	if name == "DEFAULT" {
		return name
	}
	return strings.ToLower(name)
}

func splitOsloAssignment(line string) (key, value string, ok bool) {
	colon, equal := strings.IndexByte(line, ':'), strings.IndexByte(line, '=')
	var sep int
	switch {
	case colon < 0 && equal < 0:
		return "", "", false
	case colon < 0 || (equal >= 0 && equal < colon):
		sep = equal
	default:
		sep = colon
	}
	key = strings.TrimSpace(line[:sep])
	value = strings.TrimSpace(line[sep+1:])
	if len(value) > 0 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		if len(value) == 1 {
			value = ""
		} else {
			value = value[1 : len(value)-1]
		}
	}
	return key, value, true
}

// get returns a key's value after oslo.config's template substitution, and
// whether it is set. section is matched as oslo.config matches group names.
func (c *osloConf) get(section, key string) (string, bool) {
	v, ok := c.lookup(normalizeOsloSection(section), key)
	if !ok {
		return "", false
	}
	return c.substitute(v.value, normalizeOsloSection(section), 0), true
}

// where names a key for an error message: "file:line: [section] key" when
// the key is set, "file: [section] key" when it is not.
func (c *osloConf) where(section, key string) string {
	if v, ok := c.lookup(normalizeOsloSection(section), key); ok {
		return fmt.Sprintf("%s:%d: [%s] %s", c.file, v.line, section, key)
	}
	return fmt.Sprintf("%s: [%s] %s", c.file, section, key)
}

func (c *osloConf) lookup(section, key string) (osloValue, bool) {
	v, ok := c.sections[section][key]
	return v, ok
}

// maxOsloSubstitutionDepth bounds `$a` -> `$b` -> ... chains (and cycles).
const maxOsloSubstitutionDepth = 8

// substitute does what oslo.config does to string values with Python's
// string.Template.safe_substitute: "$$" and "\$" are a literal '$'; "$name"
// and "${name}" are replaced by the option name of the same section, or of
// DEFAULT, and "${group.name}" by that group's option. A name this file does
// not set is left as written: oslo.config would use the option's default,
// which only the service knows. (This matters for passwords: a '$' in one
// is written "$$" in a rendered config.)
func (c *osloConf) substitute(s, section string, depth int) string {
	if !strings.ContainsRune(s, '$') {
		return s
	}
	s = strings.ReplaceAll(s, `\$`, "$$")
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.WriteByte(s[i])
			i++
			continue
		}
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "$"):
			b.WriteByte('$')
			i += 2
			continue
		case strings.HasPrefix(rest, "{"):
			if end := strings.IndexByte(rest, '}'); end > 0 && isOsloTemplateID(rest[1:end]) {
				b.WriteString(c.resolve(rest[1:end], s[i:i+end+2], section, depth))
				i += end + 2
				continue
			}
		default:
			if n := osloTemplateIDLen(rest); n > 0 {
				b.WriteString(c.resolve(rest[:n], s[i:i+1+n], section, depth))
				i += 1 + n
				continue
			}
		}
		b.WriteByte('$') // not a placeholder: kept, as safe_substitute does
		i++
	}
	return b.String()
}

// resolve is one placeholder's replacement; literal is what was written.
func (c *osloConf) resolve(name, literal, section string, depth int) string {
	if depth >= maxOsloSubstitutionDepth {
		return literal
	}
	if group, opt, ok := strings.Cut(name, "."); ok {
		if v, found := c.lookup(normalizeOsloSection(group), opt); found {
			return c.substitute(v.value, normalizeOsloSection(group), depth+1)
		}
	}
	for _, sec := range []string{section, "DEFAULT"} {
		if v, found := c.lookup(sec, name); found {
			return c.substitute(v.value, sec, depth+1)
		}
	}
	return literal
}

// osloTemplateIDLen is the length of the placeholder name at the start of s
// (oslo.config's idpattern `[_a-z][._a-z0-9]*`, matched case-insensitively).
func osloTemplateIDLen(s string) int {
	n := 0
	for n < len(s) {
		ch := s[n]
		isLetter := ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z'
		if !isLetter && (n == 0 || ch != '.' && (ch < '0' || ch > '9')) {
			break
		}
		n++
	}
	return n
}

func isOsloTemplateID(s string) bool { return s != "" && osloTemplateIDLen(s) == len(s) }

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
		return fmt.Errorf("transport URL %s: %s", redactURL(raw), fmt.Sprintf(format, args...))
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

// redactURL replaces every password in a transport URL with "***", also in
// URLs that do not parse: the authority is taken to run to the last '@'
// before the query, so that a password containing an unescaped '/' or '?'
// is still hidden.
func redactURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		if strings.ContainsRune(raw, '@') {
			return "***" // not a URL, but it may hold credentials
		}
		return raw
	}
	head, rest := raw[:i+3], raw[i+3:]
	end := len(rest)
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if j := strings.IndexAny(rest[at:], "/?#"); j >= 0 {
			end = at + j
		}
	} else if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		end = j
	}
	authority, tail := rest[:end], rest[end:]
	parts := strings.Split(authority, ",")
	lastCred := -1 // parts up to the last one with credentials may hold a split password
	for k, p := range parts {
		if strings.ContainsRune(p, '@') {
			lastCred = k
		}
	}
	for k, p := range parts {
		at := strings.LastIndexByte(p, '@')
		switch {
		case at >= 0:
			if user, _, hasPass := strings.Cut(p[:at], ":"); hasPass {
				parts[k] = user + ":***" + p[at:]
			} else {
				parts[k] = "***" + p[at:] // "pa,ss@h": the tail of a password with a ','
			}
		case k < lastCred:
			if user, _, hasColon := strings.Cut(p, ":"); hasColon {
				parts[k] = user + ":***"
			}
		}
	}
	return head + strings.Join(parts, ",") + tail
}
