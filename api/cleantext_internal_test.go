package api

import (
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// A Company's text in tool descriptions (for a model) and error strings
// goes through the one cleaner (internal/companytext).
func TestCompanyTextClean(t *testing.T) {
	companytexttest.Check(t, "cleanText", cleanText(companytexttest.Hostile, maxText))
}
