package main

import "testing"

// The build cost section is found up to the next section, or the end.
func TestSection(t *testing.T) {
	md := "# Performance\n\n| a |\n\n## Build cost\n\nfigures\n\n## benchstat\n\n```\n```\n"
	if got, want := section(md, "## Build cost"), "## Build cost\n\nfigures\n\n"; got != want {
		t.Fatalf("section = %q, want %q", got, want)
	}
	if got := section(md+"## Build cost\n\nlast\n", "## Build cost"); got != "## Build cost\n\nfigures\n\n" {
		t.Fatalf("the first section: %q", got)
	}
	if got := section("# Performance\n\n## Build cost\n\nlast\n", "## Build cost"); got != "## Build cost\n\nlast\n" {
		t.Fatalf("a section at the end: %q", got)
	}
	if got := section("# Performance\n", "## Build cost"); got != "" {
		t.Fatalf("no section: %q", got)
	}
}
