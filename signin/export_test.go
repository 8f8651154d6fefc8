package signin

// The errors no caller branches on, named for the tests that match them.
var (
	ErrStateMismatch     = errStateMismatch
	ErrIssuerMissing     = errIssuerMissing
	ErrDeviceCodeExpired = errDeviceCodeExpired
	ErrUnknownSignIn     = errUnknownSignIn
	ErrSignInInProgress  = errSignInInProgress
	ErrNoAnswer          = errNoAnswer
)
