package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/api"
)

// InputSchema gives every endpoint of the fake's description one object
// schema without $ref within the bound, the body under "body"; ArgsOf
// splits such an object back into a call's Args; an endpoint of another
// description is refused.
func TestInputSchema(t *testing.T) {
	_, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	for _, ep := range oa.Endpoints() {
		s, err := oa.InputSchema(ep, 0)
		if err != nil {
			t.Fatalf("%s: %v", ep.ID, err)
		}
		var top struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(s, &top); err != nil || top.Type != "object" {
			t.Fatalf("%s: %s", ep.ID, s)
		}
		if strings.Contains(string(s), "$ref") || strings.Contains(string(s), "$defs") || len(s) > 16<<10 {
			t.Errorf("%s: %d bytes: %.200s", ep.ID, len(s), s)
		}
		for _, p := range ep.Parameters {
			if top.Properties[p.Name] == nil {
				t.Errorf("%s: no property for parameter %s", ep.ID, p.Name)
			}
		}
		if _, body := top.Properties["body"]; body != (ep.Body != nil) {
			t.Errorf("%s: a body property %v, a body %v", ep.ID, body, ep.Body != nil)
		}
		// A smaller bound is kept, cutting the schema down.
		if small, err := oa.InputSchema(ep, 200); err != nil || len(small) > 200 {
			t.Errorf("%s: bound 200: %d bytes, %v", ep.ID, len(small), err)
		}
	}
	ex, _ := oa.Endpoint("exchangeItem")
	a := ex.ArgsOf(map[string]any{"id": "ord_7Hk2", "body": map[string]any{"item_id": "itm_4Qa"}})
	if a.Params["id"] != "ord_7Hk2" || len(a.Params) != 1 || a.Body.(map[string]any)["item_id"] != "itm_4Qa" {
		t.Errorf("ArgsOf: %+v", a)
	}
	// An endpoint of another description is refused.
	other := &api.Endpoint{ID: "x", Method: "GET", Path: "/x"}
	if _, err := oa.InputSchema(other, 0); !errors.Is(err, api.ErrUnknownEndpoint) {
		t.Errorf("InputSchema of a foreign endpoint: %v", err)
	}
	if _, err := oa.CallEndpoint(context.Background(), other, nil); !errors.Is(err, api.ErrUnknownEndpoint) {
		t.Errorf("CallEndpoint of a foreign endpoint: %v", err)
	}
}

// A parameter called "body" moves the request body to "request_body".
func TestInputSchemaBodyNameClash(t *testing.T) {
	_, sess := setup(t, nil)
	desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"https://api.example.test"}],
	 "paths":{"/notes":{"post":{"operationId":"addNote","parameters":[{"name":"body","in":"query","schema":{"type":"string"}}],
	 "requestBody":{"required":true,"content":{"application/json":{"schema":{"type":"object"}}}},"responses":{"200":{"description":"ok"}}}}}}`
	oa, err := api.NewOpenAPIFromBytes(context.Background(), sess, entry(t, sess.Company(), api.TypeOpenAPI), []byte(desc))
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := oa.Endpoint("addNote")
	s, err := oa.InputSchema(ep, 0)
	if err != nil || !strings.Contains(string(s), `"request_body"`) || !strings.Contains(string(s), `"required":["request_body"]`) {
		t.Fatalf("%s, %v", s, err)
	}
	a := ep.ArgsOf(map[string]any{"body": "a query value", "request_body": map[string]any{"text": "hi"}})
	if a.Params["body"] != "a query value" || a.Body.(map[string]any)["text"] != "hi" {
		t.Fatalf("ArgsOf: %+v", a)
	}
}
