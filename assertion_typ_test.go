package poppy_test

import (
	"os"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// the package doc says client and Session assertions carry typ
// "JWT" (RFC 7519 section 5.1); so do the assertions sent.
func TestA04_AssertionsCarryTypJWT(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.session("alice")
	n := 0
	for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
		for _, j := range []*poppytest.JWT{r.Assertion, r.ClientAssertion} {
			if j == nil {
				continue
			}
			n++
			if typ, _ := j.Header["typ"].(string); typ != "JWT" {
				t.Fatalf("assertion header typ %v, want \"JWT\"", j.Header["typ"])
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d assertions seen, want the client and the Session assertion", n)
	}
}

// Issue 21 item 9: docs/decisions.md says what the assertions carry,
// as the package doc does: typ "JWT", never "no typ header".
func TestA04_DecisionsDocSaysTypJWT(t *testing.T) {
	b, err := os.ReadFile("docs/decisions.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## A-04")
	if start < 0 {
		t.Fatal("docs/decisions.md has no A-04 section")
	}
	sec := doc[start:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}
	if strings.Contains(sec, "no `typ`") || !strings.Contains(sec, "`typ` `\"JWT\"`") {
		t.Fatalf("A-04 in docs/decisions.md does not say the assertions carry typ \"JWT\":\n%s", sec)
	}
}
