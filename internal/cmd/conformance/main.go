// Command conformance writes docs/conformance.md: every rule of the
// protocol (internal/rules/rules.txt, kept in this module in its own words), and the
// tests of the module that show it.
//
//	go generate github.com/poppyproto/poppy   (runs: go run ./internal/cmd/conformance)
//	go run ./internal/cmd/conformance -check  (exit 1 if the file is stale)
//
// A test shows a rule by naming its ID in its name (TestPA_4_3_02_Proof,
// TestPA_4_5_05_to_08_Checks, TestPA_4_6_10_and_11_Expiry) or in a comment
// inside or above it (// PA-4.3-02). The command reads every _test.go file
// under the module root with go/parser, so IDs in strings don't count.
// Nothing outside the module is read.
//
// A rule rules.txt marks "Withdrawn" (a duplicate the requirements table
// withdrew) is listed but not counted, and a test naming it is reported
// as naming no rule. A rule that a test file or testdata names only in a
// string, where a count of IDs in the files' text (as the project's
// requirement coverage tool makes) would find it, is reported too: the
// two counts would differ. The command exits 1 on either (after writing
// the file), and TestDocUpToDate fails on them.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/poppyproto/poppy/internal/rules"
)

// rulesText is the module's rules list, kept in internal/rules.
var rulesText = rules.Text

func main() {
	root := flag.String("root", ".", "the module root")
	out := flag.String("o", "docs/conformance.md", "the file to write, relative to -root")
	check := flag.Bool("check", false, "report whether the file is up to date instead of writing it")
	flag.Parse()
	doc, unknown, loose, err := generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	for _, u := range unknown {
		fmt.Fprintf(os.Stderr, "conformance: %s names %s, which is not a rule\n", u.test, u.id)
	}
	for _, l := range loose {
		fmt.Fprintf(os.Stderr, "conformance: %s names %s only in a string: name it in the test's name or a comment\n", l.test, l.id)
	}
	bad := len(unknown) > 0 || len(loose) > 0
	path := filepath.Join(*root, *out)
	if *check {
		cur, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(cur, doc) {
			fmt.Fprintf(os.Stderr, "conformance: %s is stale: run go generate github.com/poppyproto/poppy\n", path)
			os.Exit(1)
		}
	} else if err := os.WriteFile(path, doc, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	if bad {
		os.Exit(1)
	}
}

// rule is one line of rules.txt. A withdrawn rule (its description starts
// with "Withdrawn") is listed but not counted.
type rule struct {
	id, section, desc string
	withdrawn         bool
}

// section is a heading of rules.txt and its rules, in file order.
type section struct {
	title string
	rules []*rule
}

func parseRules(text string) ([]*section, map[string]*rule, error) {
	var secs []*section
	byID := map[string]*rule{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "# "):
		case strings.HasPrefix(line, "## "):
			secs = append(secs, &section{title: strings.TrimPrefix(line, "## ")})
		default:
			id, desc, ok := strings.Cut(line, " ")
			if !ok || !idRE.MatchString(id) || len(secs) == 0 {
				return nil, nil, fmt.Errorf("rules.txt:%d: want \"ID description\" under a section", i+1)
			}
			if byID[id] != nil {
				return nil, nil, fmt.Errorf("rules.txt:%d: %s twice", i+1, id)
			}
			r := &rule{id: id, section: secs[len(secs)-1].title, desc: desc, withdrawn: strings.HasPrefix(desc, "Withdrawn")}
			byID[id] = r
			secs[len(secs)-1].rules = append(secs[len(secs)-1].rules, r)
		}
	}
	return secs, byID, nil
}

var (
	idRE = regexp.MustCompile(`^(?:PA|CO)-[A-Z0-9.]+-[0-9]{2}$`)
	// An ID anywhere in a file's text, as the requirement coverage tool
	// finds it.
	looseIDRE = regexp.MustCompile(`\b(?:PA|CO)-[A-Z0-9.]+-[0-9]{2}\b`)
	// An ID in a comment.
	commentIDRE = regexp.MustCompile(`\b(?:PA|CO)-(?:OPS[0-9]+|[0-9]+(?:\.[0-9]+)*)-[0-9]{2}\b`)
	// An ID in a test name: PA_4_3_02, CO_OPS5_03, with _to_NN and
	// _and_NN for more rules of the same section.
	nameIDRE = regexp.MustCompile(`(PA|CO)_(OPS[0-9]+|[0-9]+(?:_[0-9]+)*?)_([0-9]{2})((?:_(?:and|to)_[0-9]{2})*)(?:_|$)`)
)

// namedIDs returns the rule IDs a test's name carries.
func namedIDs(name string) []string {
	var out []string
	for _, m := range nameIDRE.FindAllStringSubmatch(name, -1) {
		party, sec, num, more := m[1], strings.ReplaceAll(m[2], "_", "."), m[3], m[4]
		id := func(n string) string { return party + "-" + sec + "-" + n }
		out = append(out, id(num))
		prev, _ := strconv.Atoi(num)
		for _, part := range strings.Split(strings.TrimPrefix(more, "_"), "_") {
			switch n, err := strconv.Atoi(part); {
			case err != nil:
			case strings.Contains(more, "to_"+part):
				for k := prev + 1; k <= n; k++ {
					out = append(out, id(fmt.Sprintf("%02d", k)))
				}
				prev = n
			default:
				out = append(out, id(part))
				prev = n
			}
		}
	}
	return out
}

// mention is a test (or helper) naming a rule.
type mention struct {
	id   string
	test string // "path: FuncName"
}

// scan returns what every _test.go file under root names, and every ID
// found anywhere in the text of those files and of the files under
// testdata directories (loose), with the file that holds it.
func scan(root string) (out, loose []mention, err error) {
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		inTestdata := strings.HasPrefix(rel, "testdata/") || strings.Contains(rel, "/testdata/")
		if !strings.HasSuffix(name, "_test.go") && !inTestdata {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, id := range looseIDRE.FindAllString(string(src), -1) {
			loose = append(loose, mention{id, rel})
		}
		if inTestdata || !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		out = append(out, scanFile(fset, f, rel)...)
		return nil
	})
	return out, loose, err
}

// scanFile attributes each ID to the function whose name carries it, or
// whose body or doc comment holds the comment naming it; a comment outside
// every function belongs to the function that follows within two lines,
// and a comment farther away (a file's opening remarks) to none.
func scanFile(fset *token.FileSet, f *ast.File, rel string) []mention {
	var funcs []*ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			funcs = append(funcs, fd)
		}
	}
	label := func(fd *ast.FuncDecl) string {
		n := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			if t := recvName(fd.Recv.List[0].Type); t != "" {
				n = t + "." + n
			}
		}
		return rel + ": " + n
	}
	var out []mention
	for _, fd := range funcs {
		for _, id := range namedIDs(fd.Name.Name) {
			out = append(out, mention{id, label(fd)})
		}
	}
	for _, cg := range f.Comments {
		owner := (*ast.FuncDecl)(nil)
		for _, fd := range funcs {
			start := fd.Pos()
			if fd.Doc != nil {
				start = fd.Doc.Pos()
			}
			if cg.Pos() >= start && cg.End() <= fd.End() {
				owner = fd
				break
			}
			if cg.End() <= start {
				if fset.Position(start).Line-fset.Position(cg.End()).Line <= 2 {
					owner = fd
				}
				break
			}
		}
		if owner == nil {
			continue
		}
		for _, id := range commentIDRE.FindAllString(cg.Text(), -1) {
			out = append(out, mention{id, label(owner)})
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return recvName(t.X)
	}
	return ""
}

// generate builds the document from rules.txt and the tests under root,
// and returns the mentions of IDs that are not rules (or are withdrawn),
// and those of rules that the files name only in strings (with the file).
func generate(root string) (doc []byte, unknown, looseOnly []mention, err error) {
	secs, byID, err := parseRules(rulesText)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return nil, nil, nil, errors.New("-root must be the module root (no go.mod there)")
	}
	ms, loose, err := scan(root)
	if err != nil {
		return nil, nil, nil, err
	}
	tests := map[string][]string{}
	for _, m := range ms {
		if r := byID[m.id]; r == nil || r.withdrawn {
			if !slices.Contains(unknown, m) {
				unknown = append(unknown, m)
			}
			continue
		}
		if !slices.Contains(tests[m.id], m.test) {
			tests[m.id] = append(tests[m.id], m.test)
		}
	}
	for _, t := range tests {
		slices.Sort(t)
	}
	for _, l := range loose {
		if r := byID[l.id]; r != nil && !r.withdrawn && len(tests[l.id]) == 0 && !slices.Contains(looseOnly, l) {
			looseOnly = append(looseOnly, l)
		}
	}
	byIDTest := func(a, b mention) int { return strings.Compare(a.id+a.test, b.id+b.test) }
	slices.SortFunc(unknown, byIDTest)
	slices.SortFunc(looseOnly, byIDTest)
	return render(secs, tests, unknown), unknown, looseOnly, nil
}

func render(secs []*section, tests map[string][]string, unknown []mention) []byte {
	var b bytes.Buffer
	b.WriteString(`# Conformance

<!-- Generated by internal/cmd/conformance from the module's tests: do not edit. Run go generate github.com/poppyproto/poppy. -->

Every rule of the Personal Agent Protocol draft 0.1 and of its operations
extension v1 has an ID. ` + "`PA-`" + ` rules bind a Personal Agent, which this SDK
is; ` + "`CO-`" + ` rules bind a Company, and package ` + "`poppytest`" + `, the SDK's fake
Company, enforces them and records a client's breaches of PA rules as
violations. The descriptions below are this module's one-line summaries;
the specification's text governs.

A test shows a rule by naming its ID in its name (` + "`TestPA_4_3_02_…`" + `) or in
a comment inside or above it (` + "`// PA-4.3-02`" + `). Each row lists those tests
(file: function); a rule without tests is not shown by a test of this
module yet. Decisions on the points the specification leaves open are in
[decisions.md](decisions.md).

`)
	// Summary.
	b.WriteString("| Section | PA rules shown | CO rules shown |\n| --- | --- | --- |\n")
	var tp, np, tc, nc int
	for _, s := range secs {
		var sp, ap, sc, ac int
		for _, r := range s.rules {
			if r.withdrawn {
				continue
			}
			if strings.HasPrefix(r.id, "PA-") {
				ap++
				if len(tests[r.id]) > 0 {
					sp++
				}
			} else {
				ac++
				if len(tests[r.id]) > 0 {
					sc++
				}
			}
		}
		tp, np, tc, nc = tp+sp, np+ap, tc+sc, nc+ac
		fmt.Fprintf(&b, "| [%s](#%s) | %s | %s |\n", s.title, anchor(s.title), frac(sp, ap), frac(sc, ac))
	}
	fmt.Fprintf(&b, "| All | %s | %s |\n", frac(tp, np), frac(tc, nc))
	for _, s := range secs {
		fmt.Fprintf(&b, "\n## %s\n\n| ID | Rule | Tests |\n| --- | --- | --- |\n", s.title)
		for _, r := range s.rules {
			ts := tests[r.id]
			cell := ""
			if r.withdrawn {
				cell = "(withdrawn: not counted)"
			}
			for i, t := range ts {
				if i > 0 {
					cell += "<br>"
				}
				cell += "`" + t + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.id, escape(r.desc), cell)
		}
	}
	if len(unknown) > 0 {
		b.WriteString("\n## IDs named by tests that are not rules, or withdrawn\n\n")
		for _, u := range unknown {
			fmt.Fprintf(&b, "- %s in `%s`\n", u.id, u.test)
		}
	}
	return b.Bytes()
}

func frac(n, d int) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%d/%d", n, d)
}

// anchor is the GitHub heading anchor of title.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
