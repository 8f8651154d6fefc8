package poppy_test

import (
	"testing"

	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
)

// A caller whose ctx is cancelled, or whose deadline passes over a slow
// connection, after the Company rotated the Account Token (or used up a
// sign-in's code) and before the SDK read the answer: the exchange and the
// write that keeps its answer finish without the caller, a second caller
// waiting on the same renewal gets its token, and the User stays signed
// in, on the in-memory store (PA-4.8-04; PA-4.5-10 and PA-4.6-08 for the
// sign-in completions). The on-disk stores run the same harness in their
// modules.
func TestPA_4_8_04_CallerGivesUp(t *testing.T) {
	testenv.CallerGivesUp(t, func(*testing.T) keystore.Store { return keystore.NewMemory() })
}
