package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves goroutines behind: MCP connections
// and the fake must end every one.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
