package llmtools

// ErrNoElicitation names, for the tests, the error no caller branches on.
var ErrNoElicitation = errNoElicitation
