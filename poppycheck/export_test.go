package poppycheck

// Unobservable and Conditional expose the catalog to the tests.
func Unobservable() map[string]string { return unobservable }
func Conditional() map[string]string  { return conditional }
