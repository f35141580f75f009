package osloconf

import "strings"

// Substituted is Get's value after the template substitution oslo.config
// applies to an option's value (ConfigOpts._substitute: Python's
// string.Template.safe_substitute, with "\$" taken as "$$"):
//   - "$$" and "\$" are a literal '$';
//   - "$name" and "${name}" are the option name of the same section, else of
//     DEFAULT; "${group.name}" is option name of group (else an option called
//     "group.name" in DEFAULT); a name is `[_a-z][._a-z0-9]*`, in any case;
//   - a substituted value is itself substituted, in its own section;
//   - any other '$' is kept.
//
// oslo.config knows every option the service registers, with its default;
// a file knows only the options it sets. A name the file does not set is
// therefore left as written, where the service would use the option's
// default (or refuse an unknown name). Chains deeper than 8 (cycles
// included) and substitutions beyond a budget of about 1 MiB are left as
// written too. (This matters for passwords: a '$' in one is written "$$" in
// a rendered config.)
func (f *File) Substituted(section, key string) (value string, line int, ok bool) {
	sec := normalizeSection(section)
	o, ok := f.lookup(sec, key)
	if !ok {
		return "", 0, false
	}
	budget := maxSubstitutionBudget
	return f.substitute(o.value, sec, 0, &budget), o.line, true
}

const (
	// maxSubstitutionDepth bounds `$a` -> `$b` -> ... chains (and cycles).
	maxSubstitutionDepth = 8
	// maxSubstitutionBudget bounds one Substituted call's work: each
	// placeholder replaced costs 1 and the length of the value put in, so
	// that "a = $b$b$b..." with b = "$c$c$c..." cannot blow up.
	maxSubstitutionBudget = 1 << 20
)

func (f *File) substitute(s, section string, depth int, budget *int) string {
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
			if end := strings.IndexByte(rest, '}'); end > 0 && isTemplateID(rest[1:end]) {
				b.WriteString(f.resolve(rest[1:end], s[i:i+end+2], section, depth, budget))
				i += end + 2
				continue
			}
		default:
			if n := templateIDLen(rest); n > 0 {
				b.WriteString(f.resolve(rest[:n], s[i:i+1+n], section, depth, budget))
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
func (f *File) resolve(name, literal, section string, depth int, budget *int) string {
	if depth >= maxSubstitutionDepth || *budget <= 0 {
		return literal
	}
	found := func(sec, key string) (string, bool) {
		o, ok := f.lookup(sec, key)
		if !ok {
			return "", false
		}
		*budget -= 1 + len(o.value)
		if *budget < 0 {
			return literal, true
		}
		return f.substitute(o.value, sec, depth+1, budget), true
	}
	if group, opt, ok := strings.Cut(name, "."); ok {
		if v, ok := found(normalizeSection(group), opt); ok {
			return v
		}
	}
	for _, sec := range []string{section, "DEFAULT"} {
		if v, ok := found(sec, name); ok {
			return v
		}
	}
	return literal
}

// templateIDLen is the length of the placeholder name at the start of s
// (oslo.config's idpattern `[_a-z][._a-z0-9]*`, matched case-insensitively).
func templateIDLen(s string) int {
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

func isTemplateID(s string) bool { return s != "" && templateIDLen(s) == len(s) }
