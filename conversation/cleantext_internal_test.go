package conversation

import (
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// Company text of events (messages, reasons, pieces, scopes) goes
// through the one cleaner (internal/companytext); TestCompanyTextInEvents
// follows it through Events.
func TestCompanyTextClean(t *testing.T) {
	companytexttest.Check(t, "cleanText", cleanText(companytexttest.Hostile))
}
