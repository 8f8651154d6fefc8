//go:build !unix

package main

// privateStateDir checks nothing where file modes don't say who can write.
func privateStateDir(string, bool, func(string)) error { return nil }
