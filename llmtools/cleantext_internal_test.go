package llmtools

import (
	"testing"

	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
)

// Company text and errors given to a model go through the one cleaner
// (internal/companytext).
func TestCompanyTextClean(t *testing.T) {
	companytexttest.Check(t, "plain", plain(companytexttest.Hostile, 8<<10))
	companytexttest.Check(t, "plain bounded", plain(companytexttest.Hostile, 30))
}
