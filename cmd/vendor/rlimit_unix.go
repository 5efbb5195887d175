//go:build unix

package main

import "syscall"

// raiseFileLimit raises the soft limit of open files to the hard one (Go's
// os package does so at start on Linux; this makes it sure everywhere) and
// returns the limit in force: the vendor's connections, its HTTP clients
// and its embedded NATS server's clients all count against it.
func raiseFileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		raised := r
		raised.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return r.Cur, err
		}
		r = raised
	}
	return r.Cur, nil
}
