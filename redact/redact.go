// Package redact hides credentials in what the agent writes where others
// read it: its log, Events, the termination message, metric labels and probe
// answers. It is one function per shape of text so that every output hides
// the same things: the password (or lone token) in a URL's userinfo, query
// parameters named like a credential, and NAME=value pairs whose name says
// the value is a secret (DB_PASSWORD=..., as a script's output shows them).
package redact

import (
	"errors"
	"net/netip"
	"net/url"
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
	if at := strings.LastIndexByte(rest, '@'); at >= 0 && userinfo(rest[:at]) {
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

// ParseError is the text of an error from url.Parse without the URL and
// without what it quotes from it: with a '#', '?' or '/' in a password,
// net/url takes the password's start for a port (invalid port ":S3cr"
// after host), and the URL it names holds the rest.
func ParseError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return quoted.ReplaceAllString(err.Error(), "...")
}

// quoted matches a Go-quoted string in an error's text.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// userinfo reports whether the text before a URL's last '@' is its
// userinfo rather than a path, a query or a fragment holding an '@'
// (opendev.org/openstack/nova@stable/2024.1, h:8080/a@b, ?email=a@b). A
// password may hold an unescaped '/', '?' or '#': then a ':' comes before
// the first of them, and what is between is not a port.
func userinfo(before string) bool {
	j := strings.IndexAny(before, "/?#")
	if j < 0 {
		return true
	}
	c := strings.IndexByte(before[:j], ':')
	if e := strings.LastIndexByte(before[:j], ']'); strings.HasPrefix(before, "[") && e > 0 {
		// An IPv6 literal's colons are not a password's: its port, if
		// any, follows the ']' (http://[::1]/a@b is a host and a path).
		// Only a real address counts: [u:pa]/ss@h is a user and password.
		if _, err := netip.ParseAddr(strings.Replace(before[1:e], "%25", "%", 1)); err == nil {
			if e+1 == j {
				return false
			}
			if before[e+1] != ':' {
				return true
			}
			c = e + 1
		}
	}
	if c < 0 {
		return false
	}
	port := before[c+1 : j]
	return port == "" || strings.Trim(port, "0123456789") != ""
}

// query hides the values of credential-named parameters in a URL's
// path?query#fragment: the query's, and the fragment's when it holds
// parameters too (#access_token=...).
func query(tail string) string {
	frag := ""
	if h := strings.IndexByte(tail, '#'); h >= 0 {
		tail, frag = tail[:h], tail[h:]
	}
	if q := strings.IndexByte(tail, '?'); q >= 0 {
		tail = tail[:q+1] + params(tail[q+1:])
	}
	if strings.Contains(frag, "=") {
		frag = "#" + params(frag[1:])
	}
	return tail + frag
}

// params hides the values of secret-named parameters of a=b&c=d (or ';').
func params(s string) string {
	var b strings.Builder
	for s != "" {
		k := strings.IndexAny(s, "&;")
		p, sep := s, ""
		if k >= 0 {
			p, sep, s = s[:k], s[k:k+1], s[k+1:]
		} else {
			s = ""
		}
		if name, _, ok := strings.Cut(p, "="); ok && SecretName(name) {
			p = name + "=" + Mask
		}
		b.WriteString(p + sep)
	}
	return b.String()
}

// secretWords are the last words of names whose values are secrets.
var secretWords = map[string]bool{
	"password": true, "passwd": true, "passphrase": true, "pwd": true, "authorization": true,
	"token": true, "secret": true, "key": true, "apikey": true,
	"credential": true, "credentials": true, "signature": true, "sig": true,
}

// SecretName reports whether a parameter or variable named name holds a
// secret: its last word (split at '_', '-', '.' and case changes) says so, as
// in DB_PASSWORD, OS_TOKEN, X-Auth-Token, api_key, sharedKey or DBPassword,
// but not DB_PASSWORD_FILE, which holds a path, nor monkey.
func SecretName(name string) bool {
	end := len(name)
	for end > 0 && !isAlnum(name[end-1]) {
		end--
	}
	name = name[:end]
	lower := strings.ToLower(name)
	for w := range secretWords {
		pos := len(name) - len(w)
		if pos < 0 || lower[pos:] != w {
			continue
		}
		switch {
		case pos == 0, !isAlnum(name[pos-1]):
			return true
		case isUpper(name[pos]) && !isUpper(name[pos-1]):
			return true // camelCase: sharedKey
		case isUpper(name[pos]) && pos+1 < len(name) && !isUpper(name[pos+1]):
			return true // an acronym before it: DBPassword, APIToken
		}
	}
	return false
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// urlInText finds URLs in free text: a scheme, "://", and everything up to
// white space or a quote.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>]+")

// Text hides credentials anywhere in free text: in every URL it holds, and
// the value of every pair whose name is a secret's (SecretName): NAME=value,
// NAME: value, "NAME": value, 'NAME': value, --name=value, --name value.
// A value is a quoted string (escapes honoured) or runs to white space, ',',
// ';' or a quote; an Authorization header's value runs to the end of the
// line (its scheme and its credentials).
func Text(s string) string {
	if strings.Contains(s, "://") {
		s = urlInText.ReplaceAllStringFunc(s, URL)
	}
	if !strings.ContainsAny(s, "=:-") {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		flag := c == ' ' && i > 0 && isAlnum(s[i-1]) // "--name value"
		if c != '=' && c != ':' && !flag {
			continue
		}
		j := i
		for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') && !flag {
			j--
		}
		quote := byte(0)
		if j > 0 && (s[j-1] == '"' || s[j-1] == '\'') {
			quote = s[j-1]
			j--
			if j > 0 && s[j-1] == '\\' {
				j-- // {\"password\": ...}: JSON inside a string
			}
		}
		k := j
		for k > 0 && isNameChar(s[k-1]) {
			k--
		}
		name := s[k:j]
		switch {
		case k == j || k < last || !SecretName(name):
			continue
		case quote != 0 && (k == 0 || s[k-1] != quote && s[k-1] != '\\'):
			continue
		case flag && !strings.HasPrefix(name, "-"):
			continue // "a password value": prose, not a flag
		}
		v := i + 1
		for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
			v++
		}
		end := valueEnd(s, v)
		if strings.HasSuffix(strings.ToLower(name), "authorization") {
			end = v + strings.IndexAny(s[v:]+"\n", "\r\n")
		}
		if val := s[v:end]; val == "" || val == Mask || flag && strings.HasPrefix(val, "-") {
			continue
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

// valueEnd is where the value starting at v ends: after its closing quote
// (a backslash escapes one), or at white space, ',', ';' or a quote.
func valueEnd(s string, v int) int {
	if v < len(s) && s[v] == '\\' && v+1 < len(s) && (s[v+1] == '"' || s[v+1] == '\'') {
		// \"value\": a quoted value inside a string
		if e := strings.Index(s[v+2:], s[v:v+2]); e >= 0 {
			return v + 2 + e + 2
		}
		return len(s)
	}
	if v < len(s) && (s[v] == '"' || s[v] == '\'') {
		for e := v + 1; e < len(s); e++ {
			switch s[e] {
			case '\\':
				e++
			case s[v]:
				return e + 1
			}
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
