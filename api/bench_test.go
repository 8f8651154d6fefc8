package api_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/poppytest"
)

// staticBearer is what a bare go-sdk client does: one Bearer token, set on
// every request.
type staticBearer struct {
	tok  string
	base http.RoundTripper
}

func (s staticBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+s.tok)
	return s.base.RoundTrip(r)
}

// BenchmarkMCPToolCall compares a tool call through the SDK (Session
// Bearer token from the cache, origin check, refusal handling) with a bare
// go-sdk client holding a static Bearer token, against the same fake MCP
// server in the same run, interleaved so that both see the same machine.
// It reports ns per call of each and their ratio (goal: ≤ 1.1).
func BenchmarkMCPToolCall(b *testing.B) {
	env, sess := setup(b, nil)
	ctx := context.Background()
	m := connectMCP(b, sess)
	tok, err := sess.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: env.Srv.EndpointURL(poppytest.EndpointMCP)})
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: staticBearer{tok: tok.Value(), base: env.Srv.Client().Transport}}
	bare, err := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: env.Srv.EndpointURL(poppytest.EndpointMCP), HTTPClient: hc, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	args := map[string]any{"query": "jacket"}
	params := &mcp.CallToolParams{Name: "search_products", Arguments: args}
	for range 20 { // warm both up
		if _, err := m.CallTool(ctx, "search_products", args); err != nil {
			b.Fatal(err)
		}
		if _, err := bare.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	var sdkT, bareT time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		first, second := func() error { _, err := m.CallTool(ctx, "search_products", args); return err },
			func() error { _, err := bare.CallTool(ctx, params); return err }
		t0 := time.Now()
		if i%2 == 0 {
			if err := first(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := second(); err != nil {
				b.Fatal(err)
			}
			sdkT += t1.Sub(t0)
			bareT += time.Since(t1)
		} else {
			if err := second(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := first(); err != nil {
				b.Fatal(err)
			}
			bareT += t1.Sub(t0)
			sdkT += time.Since(t1)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	sdkNs, bareNs := float64(sdkT.Nanoseconds())/n, float64(bareT.Nanoseconds())/n
	if sdkNs < 1000 || bareNs < 1000 || sdkNs > 10*bareNs {
		b.Fatalf("implausible figures: SDK %.0f ns/call, bare %.0f ns/call", sdkNs, bareNs)
	}
	b.ReportMetric(sdkNs, "sdk-ns/call")
	b.ReportMetric(bareNs, "bare-ns/call")
	b.ReportMetric(sdkNs/bareNs, "sdk/bare")
}

// BenchmarkLoadOpenAPI measures parsing, validating and indexing the
// fake's description (kin-openapi) from its bytes, and LoadOpenAPI within
// max-age, answered by the document cache and the parsed-description cache
// without a request.
func BenchmarkLoadOpenAPI(b *testing.B) {
	env, sess := setup(b, nil)
	ctx := context.Background()
	resp, err := env.Srv.Client().Get(env.Srv.EndpointURL(poppytest.EndpointAPI) + "/openapi.json")
	if err != nil {
		b.Fatal(err)
	}
	desc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e := entry(b, sess.Company(), api.TypeOpenAPI)
	b.Run("parse+index", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(desc)))
		start := time.Now()
		for b.Loop() {
			n, err := api.IndexDescription(ctx, e, desc)
			if err != nil || n != 6 {
				b.Fatal(err)
			}
		}
		if per := time.Since(start) / time.Duration(b.N); per < 10*time.Microsecond {
			b.Fatalf("implausible: %v per load of %d bytes", per, len(desc))
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		before := descriptionFetches(env)
		for b.Loop() {
			if _, err := api.LoadOpenAPI(ctx, sess, e, nil); err != nil {
				b.Fatal(err)
			}
		}
		if n := descriptionFetches(env) - before; n > 1 {
			b.Fatalf("%d fetches for cached loads", n)
		}
	})
}
