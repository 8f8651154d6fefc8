package browser

// ErrInsecureURL names, for the tests, the error no caller branches on.
var ErrInsecureURL = errInsecureURL
