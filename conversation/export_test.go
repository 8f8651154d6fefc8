package conversation

// The errors no caller branches on, named for the tests that match them.
var (
	ErrEmptyMessage   = errEmptyMessage
	ErrInvalidData    = errInvalidData
	ErrInvalidContext = errInvalidContext
	ErrMarkupInText   = errMarkupInText
	ErrInvalidID      = errInvalidID
	ErrCursorStuck    = errCursorStuck
)
