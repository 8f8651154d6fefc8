package poppy_test

import (
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
