package poppycheck

// unobservable says, for each Company rule the check never tests, why an
// agent can't see it from outside (or can't without breaking a rule of
// its own). docs/check.md lists the same.
var unobservable = map[string]string{}
