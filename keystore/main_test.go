package keystore_test

import (
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}
