package api_test

import (
	"context"
	"io"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/poppyproto/poppy/poppytest"
)

// CO-6-02: the fake Company's OpenAPI description is 3.1 and validates
// with kin-openapi; it describes the 202 + operation answer and the
// address endpoint with its custom scope. (The test lives here, in the
// module that depends on kin-openapi, so that the root module does not.)
func TestCO_6_02_FakeDescriptionValidates(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	resp, err := srv.Client().Get(srv.EndpointURL(poppytest.EndpointAPI) + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET openapi.json: %d %v", resp.StatusCode, err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the description doesn't validate: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	ex := doc.Paths.Find("/orders/{id}/exchanges").Post
	a202 := ex.Responses.Value("202")
	if a202 == nil || a202.Value.Content.Get("application/json").Schema.Value.Properties["operation"] == nil {
		t.Fatal("exchanges has no 202 with operation")
	}
	op := a202.Value.Content.Get("application/json").Schema.Value.Properties["operation"].Value
	for _, f := range []string{"operation_id", "revision", "state", "summary", "confirmation", "result"} {
		if !slices.Contains(op.Required, f) {
			t.Errorf("operation schema doesn't require %s", f)
		}
	}
	addr := doc.Paths.Find("/addresses")
	if addr == nil || addr.Get == nil || addr.Get.Security == nil || (*addr.Get.Security)[0]["poppySession"][0] != "addresses" {
		t.Fatal("no /addresses needing the addresses scope")
	}
}
