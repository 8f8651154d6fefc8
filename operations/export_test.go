package operations

// The errors no caller branches on, named for the tests that match them.
var (
	ErrApprovalWithdrawn     = errApprovalWithdrawn
	ErrNoWebsite             = errNoWebsite
	ErrNotConfirmedOnWebsite = errNotConfirmedOnWebsite
	ErrNoTerminal            = errNoTerminal
)
