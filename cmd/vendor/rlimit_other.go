//go:build !unix

package main

// raiseFileLimit has nothing to raise here; 0 means unknown.
func raiseFileLimit() (uint64, error) { return 0, nil }
