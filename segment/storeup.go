package segment

// StoreUp reports whether the last store call succeeded: false from the
// first failed call of an outage until a call succeeds again.
func (a *Allocator) StoreUp() bool { return !a.storeDown.Load() }
