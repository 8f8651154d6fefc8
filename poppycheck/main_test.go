package poppycheck_test

import (
	"os"
	"testing"

	"github.com/poppyproto/poppy/internal/realtest"
)

// TestMain prints, after the tests, one line per real component a test
// skipped without (oidc-provider, for TestOIDCProviderCompany).
func TestMain(m *testing.M) { os.Exit(realtest.Main(m).Run()) }
