package redact

import (
	"strings"
	"testing"
)

const tok = "Qm9vdHN0cmFwLXNlc3Npb24tdG9rZW4tZm9yLXRlc3RzLW9ubHk" // 51 bytes

func TestSecrets(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a " + tok + " b", "a [redacted] b"},
		{"x" + tok + tok, "x[redacted][redacted]"},
		{"cut: " + tok[:50], "cut: [redacted]"},                  // the prefix a cut left at the end
		{"cut: " + tok[:20] + "… more", "cut: [redacted]… more"}, // before a cut's mark
		{"cut: " + tok[:5] + "…", "cut: [redacted]…"},
		{"cut: " + tok[:3] + "…", "cut: " + tok[:3] + "…"}, // too short to be told from text
		{"tail " + tok[30:] + " x", "tail [redacted] x"},   // a stretch from the middle
		{"mid " + tok[10:18] + " x", "mid [redacted] x"},
		{"mid " + tok[10:17] + " x", "mid " + tok[10:17] + " x"},
		{"nothing here", "nothing here"},
		{"", ""},
	} {
		if got := Secrets(tc.in, []string{"", tok}); got != tc.want {
			t.Errorf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A short secret is replaced only whole; a JSON-escaped form too.
	if got := Secrets(`a "abc" b`, []string{"abc"}); got != `a "[redacted]" b` {
		t.Errorf("short: %q", got)
	}
	q := `tok<en>&"quoted"-0123456789`
	if got := Secrets(`{"v":"tok\u003cen\u003e\u0026\"quoted\"-0123456789"}`, []string{q}); strings.Contains(got, "quoted") {
		t.Errorf("JSON-escaped: %q", got)
	}
}

// Whatever the text, no stretch of MinFragment bytes of a secret survives,
// nor a prefix of MinCut bytes at the end.
func FuzzSecrets(f *testing.F) {
	f.Add("error: "+tok[:40], 0)
	f.Add(strings.Repeat(tok, 3)+"…", 7)
	f.Fuzz(func(t *testing.T, s string, cut int) {
		if cut < 0 {
			cut = -cut
		}
		s += tok[:cut%len(tok)]
		got := Secrets(s, []string{tok})
		for i := 0; i+MinFragment <= len(tok); i++ {
			if strings.Contains(got, tok[i:i+MinFragment]) {
				t.Fatalf("%q survives in %q", tok[i:i+MinFragment], got)
			}
		}
		for k := MinCut; k <= len(tok); k++ {
			if strings.HasSuffix(got, tok[:k]) {
				t.Fatalf("prefix %q ends %q", tok[:k], got)
			}
		}
	})
}
