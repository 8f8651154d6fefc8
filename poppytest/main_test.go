package poppytest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves goroutines behind: Close must end
// every listener, connection and handler of the fake.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
