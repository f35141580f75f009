package osloconf

import (
	"bytes"
	"maps"
	"regexp"
	"strconv"
	"testing"
)

var errPrefixRE = regexp.MustCompile(`^(.*?):(\d+): `)

// FuzzParse: Parse never panics; its errors start "name:LINE: " with LINE a
// line of the input (the first, for empty input); how lines end ("\n",
// "\r\n", "\r") changes nothing, values included; every option
// it reads can be got and substituted.
func FuzzParse(f *testing.F) {
	for _, c := range osloAllCases() {
		f.Add([]byte(c))
	}
	for _, c := range substitutionCases {
		f.Add([]byte(c))
	}
	f.Add([]byte("[DEFAULT]\na = $b ${c} ${DEFAULT.a} $$ \\$\nb = $a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.conf", data)
		if err != nil {
			m := errPrefixRE.FindStringSubmatch(err.Error())
			if m == nil || m[1] != "fuzz.conf" {
				t.Fatalf("%q: the error does not start with fuzz.conf:LINE: %v", data, err)
			}
			line, _ := strconv.Atoi(m[2])
			if last := max(1, countLines(data)); line < 1 || line > last {
				t.Fatalf("%q: line %d of %d: %v", data, line, last, err)
			}
			if file != nil {
				t.Fatalf("%q: a File with an error", data)
			}
		} else {
			for _, s := range file.Sections() {
				for _, k := range file.Keys(s) {
					v, line, ok := file.Get(s, k)
					if !ok || line < 1 || line > countLines(data) {
						t.Fatalf("%q: [%s] %s = %q at line %d, %v", data, s, k, v, line, ok)
					}
					if _, sline, sok := file.Substituted(s, k); !sok || sline != line {
						t.Fatalf("%q: [%s] %s: Substituted at line %d, %v", data, s, k, sline, sok)
					}
				}
			}
		}
		if bytes.IndexByte(data, '\r') >= 0 {
			return
		}
		for _, nl := range []string{"\r\n", "\r"} {
			other := bytes.ReplaceAll(data, []byte("\n"), []byte(nl))
			ofile, oerr := Parse("fuzz.conf", other)
			if (err == nil) != (oerr == nil) {
				t.Fatalf("%q: %v; with %q line ends: %v", data, err, nl, oerr)
			}
			if err != nil {
				if a, b := errPrefixRE.FindString(err.Error()), errPrefixRE.FindString(oerr.Error()); a != b {
					t.Fatalf("%q: %v; with %q line ends: %v", data, err, nl, oerr)
				}
				continue
			}
			if a, b := values(file), values(ofile); !maps.EqualFunc(a, b, maps.Equal) {
				t.Fatalf("%q: %q; with %q line ends: %q", data, a, nl, b)
			}
		}
	})
}

// countLines counts the lines of data as Parse splits them.
func countLines(data []byte) int {
	n := 0
	for len(data) > 0 {
		_, data = NextLine(data)
		n++
	}
	return n
}
