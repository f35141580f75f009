package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Stage is one FROM of a Dockerfile, with what its instructions set.
type Stage struct {
	From       string // after ARG substitution
	Name       string // AS name, or ""
	Workdir    string
	User       string
	Env        []string // KEY=value, in order
	Entrypoint []string
	Cmd        []string
	Labels     map[string]string
	Copies     []Copy
	Runs       []string
}

// Copy is one COPY instruction.
type Copy struct {
	From  string // --from=, "" for the build context
	Chown string // --chown=UID:GID, numeric
	Chmod int64  // --chmod=OCTAL as a tar mode (setgid included); 0: as the source
	Srcs  []string
	Dest  string
	Line  int
}

// ParseDockerfile reads the instructions the project's Dockerfiles use
// (ARG, FROM ... AS, WORKDIR, COPY [--from], RUN, ENV, USER, LABEL,
// ENTRYPOINT, CMD; continuation lines; ${VAR} from ARG). args overrides
// ARG defaults as --build-arg does. Anything else is an error naming the
// file and line: an image built here must not silently differ from the
// Dockerfile's.
func ParseDockerfile(file string, args map[string]string) ([]*Stage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	var stages []*Stage
	var cur *Stage
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		no, l := i+1, strings.TrimSpace(lines[i])
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		fail := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s", file, no, fmt.Sprintf(format, a...))
		}
		instr, rest, _ := strings.Cut(l, " ")
		instr, rest = strings.ToUpper(instr), strings.TrimSpace(rest)
		if instr != "ARG" && instr != "FROM" && cur == nil {
			return nil, fail("%s before FROM", instr)
		}
		if instr != "RUN" {
			rest = expand(rest, vars)
		}
		switch instr {
		case "ARG":
			k, v, hasDefault := strings.Cut(rest, "=")
			if over, ok := args[k]; ok {
				v = over
			} else if !hasDefault {
				v = ""
			}
			vars[k] = v
		case "FROM":
			f := strings.Fields(rest)
			switch {
			case len(f) == 1:
			case len(f) == 3 && strings.EqualFold(f[1], "AS"):
			default:
				return nil, fail("FROM %q: want IMAGE [AS NAME]", rest)
			}
			cur = &Stage{From: f[0], Workdir: "/", Labels: map[string]string{}}
			if len(f) == 3 {
				cur.Name = f[2]
			}
			stages = append(stages, cur)
		case "WORKDIR":
			cur.Workdir = path.Join(cur.Workdir, rest)
		case "USER":
			cur.User = rest
		case "RUN":
			cur.Runs = append(cur.Runs, rest)
		case "ENV":
			kvs, err := keyValues(rest)
			if err != nil {
				return nil, fail("ENV: %v", err)
			}
			cur.Env = append(cur.Env, kvs...)
		case "LABEL":
			kvs, err := keyValues(rest)
			if err != nil {
				return nil, fail("LABEL: %v", err)
			}
			for _, kv := range kvs {
				k, v, _ := strings.Cut(kv, "=")
				cur.Labels[k] = v
			}
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				return nil, fail("%s must be in JSON form: %v", instr, err)
			}
			if instr == "ENTRYPOINT" {
				cur.Entrypoint = argv
			} else {
				cur.Cmd = argv
			}
		case "COPY":
			f := strings.Fields(rest)
			c := Copy{Line: no}
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if from, ok := strings.CutPrefix(f[0], "--from="); ok {
					c.From = from
				} else if chown, ok := strings.CutPrefix(f[0], "--chown="); ok && numericOwner.MatchString(chown) {
					c.Chown = chown
				} else if chmod, ok := strings.CutPrefix(f[0], "--chmod="); ok && octalMode.MatchString(chmod) {
					c.Chmod, _ = strconv.ParseInt(chmod, 8, 64)
				} else {
					return nil, fail("COPY flag %s is not supported (--from=STAGE, --chown=UID:GID, --chmod=OCTAL)", f[0])
				}
				f = f[1:]
			}
			if len(f) < 2 {
				return nil, fail("COPY needs a source and a destination")
			}
			c.Srcs, c.Dest = f[:len(f)-1], f[len(f)-1]
			cur.Copies = append(cur.Copies, c)
		default:
			return nil, fail("instruction %s is not supported here", instr)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", file)
	}
	return stages, nil
}

var (
	numericOwner = regexp.MustCompile(`^[0-9]+:[0-9]+$`)
	octalMode    = regexp.MustCompile(`^[0-7]{3,4}$`)
)

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// expand substitutes ${VAR} and $VAR from ARG values; unknown ones are left
// as they are.
func expand(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

// keyValues splits `k1=v1 k2="v 2"` (ENV and LABEL's key=value form) into
// k=v strings with the quotes removed.
func keyValues(s string) ([]string, error) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\"") {
			return nil, fmt.Errorf("%q: want KEY=VALUE", s)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			v, rest = rest[1:end+1], rest[end+2:]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out = append(out, k+"="+v)
		s = rest
	}
	return out, nil
}
