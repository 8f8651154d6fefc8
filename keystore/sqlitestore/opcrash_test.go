package sqlitestore_test

// Package operations' child-process crash tests (internal/testenv/opcrash)
// on a shared SQLite keystore.

import (
	"path/filepath"
	"testing"

	"github.com/poppyproto/poppy/internal/testenv/opcrash"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// openOpCrashStore is the keystore the operations crash tests share with
// their children.
func openOpCrashStore(dir string) (opcrash.Store, error) {
	return sqlitestore.Open(filepath.Join(dir, "keystore.db"), nil)
}

// OPS 6, PA-OPS6-03: a process killed right after it sent a confirm
// leaves the confirm in the journal; the restarted process recovers the
// operation, which the Company performed exactly once, and sends no new
// proposal.
func TestCrashRecovery(t *testing.T) { opcrash.CrashRecovery(t, openOpCrashStore) }

// OPS 6 across a restart: a process that dies after it sent a proposing
// request, before it journalled the answer, leaves the request in the
// journal; the restarted process sends the same request with the same
// Idempotency-Key and gets the operation the Company proposed for the
// first one. Six items, each dying one of two ways: killed (SIGKILL) while
// the Company holds the request, or exiting as soon as the 202 arrived.
// One operation per item, against a Company that proposes anew for every
// request it doesn't recognise as a retry; and a later process sends
// nothing while it is open (PA-OPS6-04).
func TestPA_OPS6_04_CrashBetweenProposalAndJournal(t *testing.T) {
	opcrash.CrashBetweenProposalAndJournal(t, openOpCrashStore)
}
