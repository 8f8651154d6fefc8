package poppy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// A Company's error text reaches error strings, logs and, through them, a
// model or a terminal: one cleaner (internal/companytext) neutralises the
// runes that could drive a terminal or reorder or hide text.
func TestCompanyErrorTextClean(t *testing.T) {
	companytexttest.Check(t, "cleanText", cleanText(companytexttest.Hostile))
	body, _ := json.Marshal(map[string]string{"error": "invalid\u202erequest\U000E0049", "error_description": companytexttest.Hostile})
	resp := &http.Response{StatusCode: 400, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(string(body))), Request: &http.Request{}}
	err := ResponseError(resp).(*Error)
	companytexttest.Check(t, "Error.Description", err.Description)
	companytexttest.Check(t, "Error.Code", err.Code)
	companytexttest.Check(t, "Error()", err.Error())
}
