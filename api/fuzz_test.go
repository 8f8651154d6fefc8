package api

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/poppyproto/poppy"
)

// The schema bounding takes any JSON a Company sends: it never panics, and
// what it returns fits the bound.
func FuzzBoundSchema(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"type":"array","items":{"$ref":"#/$defs/A"}}}}`)
	f.Add(`{"$ref":"#"}`)
	f.Add(`{"allOf":[{"$ref":"#/x/0"}],"x":[{"type":"string"}]}`)
	f.Add(`[1,2,{"$ref":"https://evil.test/"}]`)
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		b, err := boundSchema(v, v, 2048, unbounded(), false)
		if err != nil {
			return
		}
		if len(b) > 2048 {
			t.Fatalf("%d bytes over the bound", len(b))
		}
	})
}

// A description of any content is refused or indexed, never a panic.
func FuzzDescription(f *testing.F) {
	f.Add(`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/a/{id}":{"get":{"operationId":"a","parameters":[{"name":"id","in":"path","required":true,"schema":{"$ref":"#/components/schemas/X"}}],"responses":{"200":{"description":"ok"}}}}},"components":{"schemas":{"X":{"type":"string"}}}}`)
	f.Add(`openapi: 3.0.0`)
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = index(context.Background(), poppy.API{Type: TypeOpenAPI, URL: "https://api.example.test/openapi.json"}, []byte(s))
	})
}
