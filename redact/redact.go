// Package redact hides credentials in what the agent writes where others
// read it: its log, Events, the termination message, metric labels and probe
// answers. It is one function per shape of text so that every output hides
// the same things: the password (or lone token) in a URL's userinfo, query
// parameters named like a credential, and NAME=value pairs whose name says
// the value is a secret (DB_PASSWORD=..., as a script's output shows them).
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces every hidden value.
const Mask = "***"

// URL hides the credentials of one URL, also of URLs that do not parse and
// of oslo's multi-host transport URLs (rabbit://a:p@h1,b:q@h2/): the
// authority is taken to run to the last '@' before the path, so a password
// holding an unescaped '/', '?' or ',' is still hidden. A userinfo without
// a password is hidden whole: it may be a token. Query parameters named like
// a credential (see SecretName) keep their name and lose their value.
func URL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		if strings.ContainsRune(raw, '@') {
			return Mask // not a URL, but it may hold credentials
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
				parts[k] = user + ":" + Mask + p[at:]
			} else {
				parts[k] = Mask + p[at:] // a lone token, or "pa,ss@h": the tail of a password with a ','
			}
		case k < lastCred:
			if user, _, hasColon := strings.Cut(p, ":"); hasColon {
				parts[k] = user + ":" + Mask
			}
		}
	}
	return head + strings.Join(parts, ",") + query(tail)
}

// query hides the values of credential-named parameters in a URL's
// path?query#fragment.
func query(tail string) string {
	q := strings.IndexByte(tail, '?')
	if q < 0 {
		return tail
	}
	path, rest := tail[:q+1], tail[q+1:]
	frag := ""
	if h := strings.IndexByte(rest, '#'); h >= 0 {
		rest, frag = rest[:h], rest[h:]
	}
	params := strings.Split(rest, "&")
	for k, p := range params {
		if name, _, ok := strings.Cut(p, "="); ok && SecretName(name) {
			params[k] = name + "=" + Mask
		}
	}
	return path + strings.Join(params, "&") + frag
}

// secretWords are the last words of names whose values are secrets.
var secretWords = map[string]bool{
	"password": true, "passwd": true, "passphrase": true, "pwd": true,
	"token": true, "secret": true, "key": true, "apikey": true,
	"credential": true, "credentials": true, "signature": true, "sig": true,
}

// SecretName reports whether a parameter or variable named name holds a
// secret: its last word (split at '_', '-', '.' and case changes) says so, as
// in DB_PASSWORD, OS_TOKEN, X-Auth-Token, api_key or sharedKey, but not
// DB_PASSWORD_FILE, which holds a path.
func SecretName(name string) bool {
	end := len(name)
	for end > 0 && !isAlnum(name[end-1]) {
		end--
	}
	start := end
	for start > 0 && isAlnum(name[start-1]) {
		c := name[start-1]
		start--
		if c >= 'A' && c <= 'Z' && start > 0 && name[start-1] >= 'a' && name[start-1] <= 'z' {
			break // camelCase: "sharedKey" ends with "Key"
		}
	}
	return secretWords[strings.ToLower(name[start:end])]
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// urlInText finds URLs in free text: a scheme, "://", and everything up to
// white space or a quote.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>]+")

// Text hides credentials anywhere in free text: in every URL it holds, and
// the value of every NAME=value or NAME: value pair (also "NAME": value,
// --name=value) whose name is a secret's (SecretName). A value is a quoted
// string or runs to white space, ',' or ';'.
func Text(s string) string {
	if strings.Contains(s, "://") {
		s = urlInText.ReplaceAllStringFunc(s, URL)
	}
	if !strings.ContainsAny(s, "=:") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '=' && s[i] != ':' {
			continue
		}
		j := i
		for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
			j--
		}
		quoted := j > 0 && s[j-1] == '"'
		if quoted {
			j--
		}
		k := j
		for k > 0 && isNameChar(s[k-1]) {
			k--
		}
		if k == j || k < last || !SecretName(s[k:j]) || quoted && (k == 0 || s[k-1] != '"') {
			continue
		}
		v := i + 1
		for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
			v++
		}
		end := valueEnd(s, v)
		if val := s[v:end]; val == "" || val == Mask || strings.Contains(val, "://") {
			continue // nothing, or a URL hidden above
		}
		b.WriteString(s[last:v])
		b.WriteString(Mask)
		last, i = end, end-1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// valueEnd is where the value starting at v ends: after its closing quote,
// or at white space, ',', ';' or a quote.
func valueEnd(s string, v int) int {
	if v < len(s) && (s[v] == '"' || s[v] == '\'') {
		if e := strings.IndexByte(s[v+1:], s[v]); e >= 0 {
			return v + e + 2
		}
		return len(s)
	}
	e := v
	for e < len(s) && !strings.ContainsRune(" \t\r\n,;\"'`", rune(s[e])) {
		e++
	}
	return e
}

func isNameChar(c byte) bool {
	return isAlnum(c) || c == '_' || c == '-' || c == '.'
}
