package keystore

// Test-only access to the stores' internals.

// Locks returns how many in-process key locks m holds or waits for.
func (m *Memory) Locks() int { return m.locks.Size() }
