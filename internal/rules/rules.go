// Package rules holds the module's list of the protocol's rules, one line
// each in the module's own words (rules.txt): the PA rules a Personal Agent
// keeps and the CO rules a Company keeps. The conformance document
// (internal/cmd/conformance) and the Company check (package poppycheck)
// read it, so a rule has one text wherever the module shows it.
package rules

import (
	_ "embed"
	"strings"
)

// Text is rules.txt: "## " section headings, then "ID description" lines.
//
//go:embed rules.txt
var Text string

// A Rule is one line of rules.txt.
type Rule struct {
	ID, Section, Text string
	// Withdrawn marks a duplicate the requirements table withdrew.
	Withdrawn bool
}

// All returns every rule in file order. Lines that don't parse are
// skipped; the conformance command reports them.
func All() []Rule {
	var out []Rule
	section := ""
	for _, line := range strings.Split(Text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "# "):
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		default:
			id, desc, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			out = append(out, Rule{ID: id, Section: section, Text: desc, Withdrawn: strings.HasPrefix(desc, "Withdrawn")})
		}
	}
	return out
}
