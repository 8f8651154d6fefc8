package poppy

import (
	"context"
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

// A Company's text shown in a Mediated Sign-In prompt (where the code was
// sent) or an error (its error code, an unknown status) goes through the
// same cleaner.
func TestMediatedTextClean(t *testing.T) {
	body, _ := json.Marshal(map[string]any{"status": "code_required", "sign_in_id": "sgn_1",
		"code": map[string]string{"sent_to": companytexttest.Hostile}})
	st, err := (&Session{}).mediatedStep(context.Background(), &MediatedStep{}, 202, body)
	if err != nil {
		t.Fatal(err)
	}
	companytexttest.Check(t, "MediatedStep.SentTo", st.SentTo)
	body, _ = json.Marshal(map[string]string{"error": companytexttest.Hostile})
	_, err = readMediated(400, body)
	companytexttest.Check(t, "mediated error code", err.(*Error).Code)
	body, _ = json.Marshal(map[string]string{"status": companytexttest.Hostile})
	_, err = (&Session{}).mediatedStep(context.Background(), &MediatedStep{}, 200, body)
	companytexttest.Check(t, "unknown status", err.Error())
}
