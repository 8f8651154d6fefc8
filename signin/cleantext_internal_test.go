package signin

import (
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// A Company's text shown in a Mediated Sign-In prompt (where the code was
// sent, its error) goes through the one cleaner (internal/companytext).
func TestCompanyTextClean(t *testing.T) {
	companytexttest.Check(t, "companyText", companyText(companytexttest.Hostile))
}
