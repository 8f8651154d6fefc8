package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	_ "modernc.org/sqlite"

	"github.com/poppyproto/poppy/browser/headless"
	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/keystore/keyring"
	"github.com/poppyproto/poppy/poppytest"
)

// Every command, with --verbose and --json, and every suggestion it makes:
// no token, proof, assertion, code, verifier, key or password appears in
// stdout or stderr. The secrets are taken from what the fake Company saw
// and from the keystore itself.
func TestNoSecretsInOutput(t *testing.T) {
	e := newCLIEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: false}})
	g := []string{"--verbose", "--json"}
	var outputs []string
	secrets := map[string]string{}
	// The keystore changes as commands run (a sign-out drops tokens), so
	// its secrets are collected after every command.
	collect := func() {
		for k, v := range e.secrets(t) {
			secrets[k] = v
		}
	}
	add := func(args ...string) string {
		out, errOut, _ := e.run(append(g, args...)...)
		outputs = append(outputs, out, errOut)
		collect()
		return out
	}
	serve := e.init(g...)
	add("identity")
	add("discover", "example.test")
	add("session", "example.test")
	add("session", "example.test", "--new")

	// Device Sign-In, approved when the code shows.
	cmd := e.command(nil, append(g, "signin", "example.test", "--method", "device", "--scope", "poppy:read", "--scope", "poppy:write")...)
	dev := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = dev, dev
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	link := dev.waitFor(t, regexp.MustCompile(`"verification_uri_complete":"(https://[^"]+)"`), 20*time.Second)[1]
	if _, err := e.srv.Browse(context.Background(), link); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("device sign-in: %v\n%s", err, dev.String())
	}
	outputs = append(outputs, dev.String())
	collect()

	// The APIs, operations and standing permissions (cmd_api.go, cmd_ops.go).
	add("apis", "example.test")
	add("api", "example.test", "GET", "/orders")
	add("api", "example.test", "POST", "/echo", "--data", `{"x":1}`)
	add("mcp", "tools", "example.test")
	add("mcp", "call", "example.test", "search_products", `{"query":"jacket"}`)
	opID := regexp.MustCompile(`"operation_id":"([^"]+)"`)
	exchange := `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`
	var ids []string
	for _, order := range []string{"ord_1", "ord_2"} {
		m := opID.FindStringSubmatch(add("api", "example.test", "POST", "/orders/"+order+"/exchanges", "--data", exchange))
		if m == nil {
			t.Fatalf("no operation proposed: %s", outputs[len(outputs)-1])
		}
		ids = append(ids, m[1])
	}
	add("ops", "list", "example.test")
	add("ops", "show", "example.test", ids[0])
	add("ops", "confirm", "example.test", ids[0]) // no terminal: declined
	add("ops", "cancel", "example.test", ids[1])
	add("ops", "track", "example.test", ids[1])
	perm := regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(add("permissions", "grant", "example.test",
		"--action", "openapi:POST /orders/{id}/exchanges", "--any", "order_id", "--any", "item_id", "--any", "replacement_sku", "--any", "price_difference"))
	if perm == nil {
		t.Fatal("no permission granted")
	}
	add("ops", "confirm", "example.test", ids[0]) // approved by the standing permission
	add("permissions", "list", "example.test")
	add("permissions", "revoke", "example.test", perm[1])
	realtest.WatchPATH() // a run without Chromium is not served from the cache once it is installed
	if _, err := headless.LookPath(); err == nil {
		trust := e.srv.BrowserTrust()
		out := add("browse", "example.test", "https://example.test/account", "--screenshot", filepath.Join(e.dir, "shot.png"),
			"--unsafe-chromium-host-rules", trust.ChromiumHostRules(), "--unsafe-chromium-trust-spki", trust.SPKI)
		if !strings.Contains(out, `"mode":"joined"`) {
			t.Fatalf("browse: %s", out)
		}
	} else {
		t.Log("no Chromium: poppy browse is left out")
	}

	// A conversation (cmd_chat.go), started and resumed.
	cc := e.command(nil, append(g, "chat", "example.test")...)
	cc.Stdin = strings.NewReader("Hello there.\n/status\n")
	chatOut := &syncBuffer{}
	cc.Stdout, cc.Stderr = chatOut, chatOut
	if err := cc.Run(); err != nil {
		t.Fatalf("chat: %v\n%s", err, chatOut.String())
	}
	outputs = append(outputs, chatOut.String())
	collect()
	if m := regexp.MustCompile(`"conversation_id":"([^"]+)","event":"started"`).FindStringSubmatch(chatOut.String()); m != nil {
		cr := e.command(nil, append(g, "chat", "example.test", "--conversation", m[1], "--no-stream")...)
		cr.Stdin = strings.NewReader("/data {\"a\":1}\n/handoff\n/close\n")
		b, _ := cr.CombinedOutput()
		outputs = append(outputs, string(b))
		collect()
	} else {
		t.Fatalf("chat started nothing: %s", chatOut.String())
	}

	// The LLM commands (cmd_llm.go): mcp-server through an MCP host that
	// calls Company tools and gets an approval, and ask against a
	// scripted model, whose requests are the model's context.
	mcpErr := &syncBuffer{}
	mcmd := e.command(nil, append(g, "mcp-server", "example.test")...)
	mcmd.Stderr = mcpErr
	mctx, mcancel := context.WithTimeout(context.Background(), 60*time.Second)
	host := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		}})
	cs, err := host.Connect(mctx, &mcp.CommandTransport{Command: mcmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mcpCall := func(name, args string) string {
		res, err := cs.CallTool(mctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("mcp-server %s: %v", name, err)
		}
		b, _ := json.Marshal(res)
		outputs = append(outputs, string(b))
		return string(b)
	}
	if lt, err := cs.ListTools(mctx, nil); err == nil {
		b, _ := json.Marshal(lt)
		outputs = append(outputs, string(b))
	}
	mcpCall("poppy_sign_in", `{"domain":"example.test"}`)
	mcpCall("example_test__mcp_search_products", `{"query":"fleece"}`)
	if m := opIDInBody.FindStringSubmatch(mcpCall(exchangeTool, exchangeArgs)); m != nil {
		mcpCall("poppy_request_approval", `{"domain":"example.test","operation_id":"`+m[1]+`"}`)
		mcpCall("poppy_get_operation", `{"domain":"example.test","operation_id":"`+m[1]+`"}`)
	} else {
		t.Fatal("mcp-server: no operation proposed")
	}
	mcpCall("poppy_list_operations", `{"domain":"example.test"}`)
	_ = cs.Close()
	mcancel()
	outputs = append(outputs, mcpErr.String())
	collect()
	if askBuilt { // poppy ask runs only in a build with the tag openai (cmd_llm.go)
		model := newFakeModel(t, append([]func(string) []modelCall{
			func(string) []modelCall { return []modelCall{{"poppy_sign_in", `{"domain":"example.test"}`}} },
			func(string) []modelCall {
				return []modelCall{{"example_test__mcp_search_products", `{"query":"fleece"}`}}
			},
		}, exchangeScript()...)...)
		add("ask", "example.test", "exchange my jacket", "--base-url", model.URL+"/v1/", "--model", "scripted")
		model.mu.Lock()
		if len(model.bodies) < 4 {
			t.Fatalf("ask: only %d model calls", len(model.bodies))
		}
		outputs = append(outputs, model.bodies...)
		model.mu.Unlock()
	} else {
		t.Log("poppy ask is not in this build (tag openai): left out")
	}

	add("session", "example.test", "--scope", "poppy:read")
	add("session", "example.test", "--scope", "poppy:write", "--scope", "addresses") // refused: a hint
	add("status")
	add("signout", "example.test")

	// Mediated Sign-In with a password on stdin.
	mc := e.command(nil, append(g, "signin", "example.test", "--method", "mediated")...)
	mc.Stdin = strings.NewReader("user@example.test\ncorrect horse\n")
	med := &syncBuffer{}
	mc.Stdout, mc.Stderr = med, med
	if err := mc.Run(); err != nil {
		t.Fatalf("mediated: %v\n%s", err, med.String())
	}
	outputs = append(outputs, med.String())
	collect()

	// Direct Sign-In: the User opens the printed link; the redirect goes to
	// serve-identity, in its own process.
	dc := e.command(nil, append(g, "signin", "example.test", "--method", "direct", "--no-open", "--scope", "addresses")...)
	dir := &syncBuffer{}
	dc.Stdout, dc.Stderr = dir, dir
	if err := dc.Start(); err != nil {
		t.Fatal(err)
	}
	authURL := dir.waitFor(t, regexp.MustCompile(`"url":"(https://[^"]+)"`), 20*time.Second)[1]
	loc, err := e.srv.Browse(context.Background(), authURL)
	if err != nil || loc == "" {
		t.Fatalf("browse: %q %v", loc, err)
	}
	resp, err := e.srv.Client().Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("callback: %d", resp.StatusCode)
	}
	if err := dc.Wait(); err != nil {
		t.Fatalf("direct: %v\n%s", err, dir.String())
	}
	outputs = append(outputs, dir.String())
	collect()
	add("status")
	add("init", "--rotate-keys")
	add("signout", "example.test")
	outputs = append(outputs, serve.String())

	collect()
	if len(secrets) < 20 {
		t.Fatalf("only %d secrets collected: the test looks at too little", len(secrets))
	}
	t.Logf("%d secrets, %d outputs", len(secrets), len(outputs))
	all := strings.Join(outputs, "\n")
	if !strings.Contains(all, `level=DEBUG`) {
		t.Fatal("--verbose logged nothing")
	}
	for s, what := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("a %s reached the output", what)
		}
	}
}

// secrets collects what must never be printed: from the fake's request
// log and from the keystore's records of secret kinds.
func (e *cliEnv) secrets(t *testing.T) map[string]string {
	out := map[string]string{"correct horse": "password"}
	put := func(v, what string) {
		if len(v) >= 8 {
			out[v] = what
		}
	}
	for _, r := range e.srv.Requests() {
		put(r.AccessToken, "Session Token")
		if r.Proof != nil {
			put(r.Proof.Compact, "DPoP proof")
		}
		if r.Assertion != nil {
			put(r.Assertion.Compact, "Session assertion")
		}
		if r.ClientAssertion != nil {
			put(r.ClientAssertion.Compact, "client assertion")
		}
		for _, k := range []string{"refresh_token", "token", "code", "code_verifier", "device_code"} {
			put(r.Form.Get(k), k)
		}
	}
	db, err := sql.Open("sqlite", filepath.Join(e.dir, ".config", "poppy", "keystore.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT kind, value FROM records WHERE kind IN ('dpop_key', 'session', 'account_token', 'pending_signin', 'agent_key')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var value []byte
		if err := rows.Scan(&kind, &value); err != nil {
			t.Fatal(err)
		}
		var v any
		if json.Unmarshal(value, &v) != nil {
			continue
		}
		walk(v, "", func(key, s string) {
			switch key {
			case "value", "refresh_token", "d", "code_verifier":
				put(s, kind+" "+key)
			}
		})
	}
	return out
}

func walk(v any, key string, f func(key, s string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			walk(e, k, f)
		}
	case []any:
		for _, e := range x {
			walk(e, key, f)
		}
	case string:
		f(key, x)
	}
}

// --keyring seals the keystore's secrets with a key kept in the OS keyring:
// the file holds no private key in clear, and opening it without --keyring
// can't read them.
func TestKeyringSealsSecrets(t *testing.T) {
	requireKeyring(t)
	e := newCLIEnv(t, nil)
	e.init("--keyring")
	out := e.mustRun("--keyring", "--json", "session", "example.test")
	if !strings.Contains(out, `"session_id"`) {
		t.Fatalf("session: %s", out)
	}
	db, err := sql.Open("sqlite", filepath.Join(e.dir, ".config", "poppy", "keystore.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM records WHERE kind IN ('dpop_key', 'agent_key') AND CAST(value AS TEXT) LIKE '%"d":%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d private keys stored in clear", n)
	}
	if _, errOut, code := e.run("session", "example.test"); code == 0 || !strings.Contains(errOut, "--keyring") {
		t.Fatalf("opened without --keyring: exit %d, %s", code, errOut)
	}
}

func requireKeyring(t *testing.T) {
	t.Helper()
	var err error
	if runtime.GOOS == "linux" && os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
		// Without a session bus, asking for one would autolaunch a bus
		// and a keyring daemon that outlive the test.
		err = errors.New("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is empty)")
	} else {
		var kr *keyring.Store
		if kr, err = keyring.New(&keyring.Options{LockDir: t.TempDir()}); err == nil {
			err = kr.Ping(context.Background())
		}
	}
	if err != nil {
		if os.Getenv("POPPY_TEST_REAL") == "1" {
			t.Fatalf("POPPY_TEST_REAL=1 but the OS keyring does not answer: %v", err)
		}
		t.Skipf("the OS keyring does not answer (%v); .ci/run starts one", err)
	}
}
