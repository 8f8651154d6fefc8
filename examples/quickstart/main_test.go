package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// The quickstart the README gives runs end to end and the fake Company
// records no rule violation.
func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"discovered \"Example Company\"",
		"started Session ses_",
		"GET https://api.example.test/products → 200 OK",
		"signed in: granted poppy:read",
		"GET https://api.example.test/orders → 200 OK",
		"API openapi at https://api.example.test/openapi.json",
		"API mcp at https://mcp.example.test/mcp",
		"OpenAPI listOrders → 200 {\"orders\":",
		"MCP search_products (protocol 2025-11-25) → {\"products\":[{\"name\":\"Stormline Insulated Jacket\"",
		"conversation cnv_",
		"text-delta, shown as it arrives",
		"company/agent: Thanks, I have noted that.",
		"conversation closed (status closed)",
		"0 rule violations",
		// The operations extension's jacket exchange.
		"→ 202: operation exc_",
		"approval: Example Company asks the User to approve revision 1",
		"this Approver answers \"approve\" by itself",
		": succeeded (confirmed revision 1, approved_by user)",
		"the Company's account of what happened: Exchange placed.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The browser step is examples/browser's: the quickstart only names it,
	// so that it builds without the DevTools Protocol client.
	if want := "browser: go run ./examples/browser joins a headless Chromium"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	// The count it prints is the number of requests it lists.
	var n, listed int
	for _, l := range strings.Split(out.String(), "\n") {
		if _, err := fmt.Sscanf(l, "the fake Company answered %d requests", &n); err == nil {
			listed = 0
			continue
		}
		if m, _, ok := strings.Cut(strings.TrimPrefix(l, "  "), " https://"); ok && strings.HasPrefix(l, "  ") && m == strings.ToUpper(m) && m != "" {
			listed++
		}
	}
	if n == 0 || n != listed {
		t.Errorf("says %d requests, lists %d:\n%s", n, listed, out.String())
	}
}
