package operations

import (
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// A Company's summary shown to the User (PlainText) and its text in error
// strings (clean) go through the one cleaner (internal/companytext).
func TestCompanyTextClean(t *testing.T) {
	companytexttest.Check(t, "PlainText", PlainText(companytexttest.Hostile, 0))
	companytexttest.Check(t, "PlainText bounded", PlainText(companytexttest.Hostile, 40))
	companytexttest.Check(t, "clean", clean(companytexttest.Hostile, 500))
}
