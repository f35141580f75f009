package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxProblems bounds how many problems of one config an error lists; the
// rest are counted ("agent.yaml: and 7 more").
const MaxProblems = 50

// Problems splits an error of Parse or Load into its problems, one a line,
// each "NAME: field.path: message". An error that is not a list of problems
// is one problem.
func Problems(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// problems gathers every independent problem of one config, so an operator
// fixes them in one pass instead of one per run (agent/render's kollaErrs
// does the same for kolla's config.json). Each is "field.path: message".
type problems struct {
	list []string
	more int
	// skip, when set, drops a problem that follows from another one.
	skip func(problem string) bool
}

// add records one problem; a message over several lines is put on one.
func (p *problems) add(format string, args ...any) {
	s := oneLine(fmt.Sprintf(format, args...))
	if p.skip != nil && p.skip(s) {
		return
	}
	if len(p.list) == MaxProblems {
		p.more++
		return
	}
	p.list = append(p.list, s)
}

// addErr records err as one problem, when there is one.
func (p *problems) addErr(err error) {
	if err != nil {
		p.add("%s", err.Error())
	}
}

// count is how many problems were recorded, listed or not.
func (p *problems) count() int { return len(p.list) + p.more }

// err is every problem, each prefixed with name ("" for none), joined one a
// line; nil when there is none.
func (p *problems) err(name string) error {
	if p.count() == 0 {
		return nil
	}
	prefix := ""
	if name != "" {
		prefix = name + ": "
	}
	errs := make([]error, 0, len(p.list)+1)
	for _, s := range p.list {
		errs = append(errs, errors.New(prefix+s))
	}
	if p.more > 0 {
		errs = append(errs, fmt.Errorf("%sand %d more", prefix, p.more))
	}
	return errors.Join(errs...)
}

// oneLine joins the lines of s with spaces ("yaml: unmarshal errors:\n
// line 3: ..." from go-yaml).
func oneLine(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, " ")
}

// problemPath is the field path a problem starts with ("probes.checks[0]"
// of "probes.checks[0].name: empty"), or "".
func problemPath(s string) string {
	steps, rest := splitPath(s)
	if len(steps) == 0 || !strings.HasPrefix(rest, ": ") {
		return ""
	}
	return strings.Join(steps, "")
}

// follows reports whether a problem at path p may only follow from the
// field at path d being dropped: p is d or under it, or the object d is in
// (whose fields are judged together: "no check type", "empty").
func follows(p, d string) bool {
	if p == "" {
		return false
	}
	if p == d || strings.HasPrefix(p, d+".") || strings.HasPrefix(p, d+"[") {
		return true
	}
	steps, _ := splitPath(d)
	return len(steps) > 1 && p == strings.Join(steps[:len(steps)-1], "")
}

// splitPath reads the field path s starts with, as steps ("probes",
// ".checks", "[0]", `["keystone"]`), and returns what follows it.
func splitPath(s string) (steps []string, rest string) {
	name := func(i int) int {
		for i < len(s) && (s[i] == '_' || s[i] == '-' || '0' <= s[i] && s[i] <= '9' || 'a' <= s[i]|0x20 && s[i]|0x20 <= 'z') {
			i++
		}
		return i
	}
	i := name(0)
	if i == 0 {
		return nil, s
	}
	steps = append(steps, s[:i])
	for i < len(s) {
		j := i
		switch {
		case s[i] == '.':
			j = name(i + 1)
			if j == i+1 {
				return steps, s[i:]
			}
		case strings.HasPrefix(s[i:], `["`):
			q, err := strconv.QuotedPrefix(s[i+1:])
			if err != nil || !strings.HasPrefix(s[i+1+len(q):], "]") {
				return steps, s[i:]
			}
			j = i + 1 + len(q) + 1
		case s[i] == '[':
			j = i + 1
			for j < len(s) && '0' <= s[j] && s[j] <= '9' {
				j++
			}
			if j == i+1 || j == len(s) || s[j] != ']' {
				return steps, s[i:]
			}
			j++
		default:
			return steps, s[i:]
		}
		steps = append(steps, s[i:j])
		i = j
	}
	return steps, ""
}
