package keystore

import "context"

// Test-only access to the stores' internals.

// SetBeforeCommit makes every later write of s call f after its statement
// and before COMMIT.
func (s *SQLite) SetBeforeCommit(f func()) { s.beforeCommit = f }

// IntegrityCheck runs PRAGMA integrity_check.
func (s *SQLite) IntegrityCheck(ctx context.Context) (string, error) {
	var res string
	err := s.db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res)
	return res, err
}

// LockDir returns the directory of s's lock files.
func (s *SQLite) LockDir() string { return s.lockDir }

// Locks returns how many in-process key locks m holds or waits for.
func (m *Memory) Locks() int { return m.locks.size() }

// Locks returns how many in-process key locks s holds or waits for.
func (s *SQLite) Locks() int { return s.locks.size() }
