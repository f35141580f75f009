package schemagen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Docs reads the Go package in dir (its files but the tests) and returns
// the doc comment of each struct field, as "TypeName.FieldName" (a field of
// an anonymous struct: "TypeName.FieldName.InnerField"), and of each type,
// as "TypeName", on one line. A field's doc is the comment above it, else
// the one after it on its line; a field with neither that follows one
// whose comment names it ("User and Group to run the service as") shares
// that comment.
func Docs(dir string) (map[string]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	docs := map[string]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, p, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("schemagen: %w", err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := text(ts.Doc)
				if doc == "" && len(gd.Specs) == 1 {
					doc = text(gd.Doc)
				}
				if doc != "" {
					docs[ts.Name.Name] = doc
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					fieldDocs(docs, ts.Name.Name, st)
				}
			}
		}
	}
	return docs, nil
}

func fieldDocs(docs map[string]string, prefix string, st *ast.StructType) {
	var shared string // the previous field's doc, for the ones it names
	for _, f := range st.Fields.List {
		doc := text(f.Doc)
		if doc == "" {
			doc = text(f.Comment)
		}
		for _, n := range f.Names {
			d := doc
			if d == "" && shared != "" && regexp.MustCompile(`\b`+n.Name+`\b`).MatchString(shared) {
				d = shared
			}
			if d != "" {
				docs[prefix+"."+n.Name] = d
			}
			if inner := structOf(f.Type); inner != nil {
				fieldDocs(docs, prefix+"."+n.Name, inner)
			}
		}
		switch {
		case f.Doc != nil:
			shared = text(f.Doc)
		case doc != "" || len(f.Names) == 0:
			shared = ""
		}
	}
}

// structOf is the anonymous struct a field's type is, if it is one.
func structOf(e ast.Expr) *ast.StructType {
	switch e := e.(type) {
	case *ast.StarExpr:
		return structOf(e.X)
	case *ast.StructType:
		return e
	}
	return nil
}

// text is a comment on one line.
func text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}
