package poppytest

// The test helper: NewServer ties a Server to a test, so that a
// configuration error fails the test and every violation the test did not
// take fails it at cleanup. Everything else in the package is the fake
// itself, which a program starts with New; neither imports package
// testing.

// TB is the part of testing.TB that NewServer uses. *testing.T,
// *testing.B and *testing.F satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// NewServer starts a fake Company for the test t. Configuration errors
// (including a poppy.json or metadata that breaks a CO rule without a
// Misconfig switch asking for it) fail t with Fatalf. NewServer registers
// t.Cleanup(s.Close) and, at cleanup, reports every Violation the test did
// not take with TakeViolations as a t.Errorf. A misuse at run time (a
// conversation that doesn't exist, a proxy that can't start) fails t too.
//
// t must not be nil: a program, or an Example, uses [New] and calls Close
// itself.
func NewServer(t TB, opts *Options) *Server {
	if t == nil {
		panic("poppytest: NewServer needs a test; a program or an Example calls New")
	}
	t.Helper()
	s, err := newServer(opts)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	s.t = t
	t.Cleanup(func() {
		s.Close()
		for _, v := range s.TakeViolations() {
			t.Errorf("poppytest: protocol violation %v", v)
		}
	})
	return s
}
