package keyring

import (
	"testing"

	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
)

// A caller that gives up after the Company rotated the Account Token, or
// used up a sign-in's code, and before the SDK read the answer, with the
// Session kept in the OS keyring: the User stays signed in (PA-4.8-04;
// PA-4.5-10 and PA-4.6-08 for the sign-in completions; internal/testenv's
// CallerGivesUp).
func TestPA_4_8_04_CallerGivesUpKeyring(t *testing.T) {
	requireKeyring(t)
	testenv.CallerGivesUp(t, func(t *testing.T) keystore.Store { return testStore(t) })
}
