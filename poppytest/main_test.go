package poppytest_test

import (
	"os"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"
)

// TestMain checks that no test leaves goroutines behind: Close must end
// every listener, connection and handler of the fake.
// With POPPYTEST_TEST_GET set, the binary is a child process of
// TestEnvShellRecipe instead.
func TestMain(m *testing.M) {
	if os.Getenv("POPPYTEST_TEST_GET") != "" {
		childGet()
	}
	leakcheck.VerifyTestMain(m)
}
