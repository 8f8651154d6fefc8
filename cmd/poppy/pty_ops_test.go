package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// deviceSignIn signs the profile in with poppy:read and poppy:write, the
// User approving in their browser.
func (e *cliEnv) deviceSignIn(t *testing.T) {
	t.Helper()
	cmd := e.command(nil, "--json", "signin", "example.test", "--method", "device", "--scope", "poppy:read", "--scope", "poppy:write")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	link := out.waitFor(t, regexp.MustCompile(`"verification_uri_complete":"(https://[^"]+)"`), 20*time.Second)[1]
	if _, err := e.srv.Browse(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("device sign-in: %v\n%s", err, out.String())
	}
}

// The User approves an operation by typing "yes" on the terminal, even
// with --json (whose stdout then holds only JSON): the summary and terms
// they are shown are the Company's, escaped (OPS 5.1).
func TestPTYOpsConfirm(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{})
	e.init()
	e.deviceSignIn(t)
	out := e.mustRun("--json", "api", "example.test", "POST", "/orders/ord_1/exchanges", "--data", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`)
	m := regexp.MustCompile(`"operation_id":"([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no operation: %s", out)
	}
	ptmx, screen, wait := onPTY(t, e.command(nil, "--json", "ops", "confirm", "example.test", m[1]))
	screen.waitFor(t, regexp.MustCompile(`Stormline Insulated Jacket`), 20*time.Second)
	screen.waitFor(t, regexp.MustCompile(`"amount": "70.00"`), 5*time.Second)
	screen.waitFor(t, regexp.MustCompile(`Type "yes" to approve`), 5*time.Second)
	if _, err := ptmx.WriteString("yes\r"); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != 0 {
		t.Fatalf("exit %d; the screen shows:\n%s", code, screen.String())
	}
	s := screen.String()
	if !strings.Contains(s, `"state":"succeeded"`) || !strings.Contains(s, `"approved_by":"user"`) {
		t.Fatalf("not confirmed by the User; the screen shows:\n%s", s)
	}
}

// On a terminal, a typed "no" declines: exit code 4, and the Company is
// told.
func TestPTYOpsDecline(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{})
	e.init()
	e.deviceSignIn(t)
	id := e.proposeExchange(t, "ord_1")
	ptmx, screen, wait := onPTY(t, e.command(nil, "ops", "confirm", "example.test", id))
	screen.waitFor(t, regexp.MustCompile(`Type "yes" to approve`), 20*time.Second)
	if _, err := ptmx.WriteString("no\r"); err != nil {
		t.Fatal(err)
	}
	if code := wait(); code != exitDeclined {
		t.Fatalf("exit %d, want %d; the screen shows:\n%s", code, exitDeclined, screen.String())
	}
	if s := e.mustRun("--json", "ops", "show", "example.test", id); !strings.Contains(s, `"state":"cancelled"`) {
		t.Fatalf("not declined at the Company: %s", s)
	}
}

// proposeExchange has the Company propose an exchange of order and returns
// the operation's ID.
func (e *cliEnv) proposeExchange(t *testing.T, order string) string {
	t.Helper()
	out := e.mustRun("--json", "api", "example.test", "POST", "/orders/"+order+"/exchanges", "--data", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`)
	m := regexp.MustCompile(`"operation_id":"([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no operation: %s", out)
	}
	return m[1]
}

// No answer leaves the operation as it is: the end of
// input at the prompt (Ctrl-D), or answers that are neither "yes" nor "no"
// (asked again, then given up), exit with code 5, and the operation stays
// proposed at the Company; nothing was declined.
func TestPTYOpsNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers string // typed at the first prompt
		asked   int
	}{
		{"eof", "\x04", 1},
		{"typo", "y\ryess\rok\r", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLIEnv(t, &poppytest.Options{})
			e.init()
			e.deviceSignIn(t)
			id := e.proposeExchange(t, "ord_1")
			p := startPTY(t, e.command(nil, "ops", "confirm", "example.test", id))
			p.screen.waitFor(t, regexp.MustCompile(`Type "yes" to approve`), 20*time.Second)
			if _, err := p.ptmx.WriteString(tc.answers); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(20 * time.Second); code != exitNoAnswer {
				t.Fatalf("exit %d, want %d; the screen shows:\n%s", code, exitNoAnswer, p.screen.String())
			}
			s := p.screen.String()
			if n := strings.Count(s, `Type "yes" to approve`); n != tc.asked {
				t.Fatalf("asked %d times, want %d:\n%s", n, tc.asked, s)
			}
			if !strings.Contains(s, "stays proposed") || strings.Contains(s, "you declined") {
				t.Fatalf("the screen does not say the operation stays proposed:\n%s", s)
			}
			if out := e.mustRun("--json", "ops", "show", "example.test", id); !strings.Contains(out, `"state":"proposed"`) {
				t.Fatalf("no answer changed the operation: %s", out)
			}
			for _, r := range e.srv.RequestsTo(poppytest.EndpointOperations) {
				if r.Method == "POST" {
					t.Fatalf("no answer sent %s %s", r.Method, r.URL) // no confirm, no cancel
				}
			}
		})
	}
}

// poppy api on a terminal indents a JSON body, with real line breaks, in
// the Company's order and with its numbers as written.
func TestPTYAPIBody(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{})
	e.init()
	body := `{"orders":[{"id":"ord_1","note":"two\nlines"}],"total":2.50,"a":1}`
	p := startPTY(t, e.command(nil, "api", "example.test", "POST", "/echo", "--data", body))
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.screen.String())
	}
	want := strings.ReplaceAll(`{
  "orders": [
    {
      "id": "ord_1",
      "note": "two\nlines"
    }
  ],
  "total": 2.50,
  "a": 1
}
`, "\n", "\r\n")
	if got := p.screen.String(); !strings.Contains(got, want) {
		t.Fatalf("the screen shows\n%q\nwant it to hold\n%q", got, want)
	}
}
