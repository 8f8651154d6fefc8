package sqlitestore

import "context"

// Test-only access to the store's internals.

// SetBeforeCommit makes every later write of s call f after its statement
// and before COMMIT.
func (s *Store) SetBeforeCommit(f func()) { s.beforeCommit = f }

// IntegrityCheck runs PRAGMA integrity_check.
func (s *Store) IntegrityCheck(ctx context.Context) (string, error) {
	var res string
	err := s.db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res)
	return res, err
}

// LockDir returns the directory of s's lock files.
func (s *Store) LockDir() string { return s.lockDir }

// Locks returns how many in-process key locks s holds or waits for.
func (s *Store) Locks() int { return s.locks.Size() }
