package sqlitestore_test

// Package conversation's child-process crash tests
// (internal/testenv/convcrash) on a shared SQLite keystore;
// keystore/pgstore runs SDKChosenIDs on PostgreSQL.

import (
	"path/filepath"
	"testing"

	"github.com/poppyproto/poppy/internal/testenv/convcrash"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// openCrashStore is the keystore of the crash tests' children, and of the
// parent where it reads what they saved.
func openCrashStore(dir string) (convcrash.Store, error) {
	return sqlitestore.Open(filepath.Join(dir, "keystore.db"), nil)
}

// A child writes a message to the outbox, the Company records it, and the
// child dies before it reads the answer (or before the request leaves); a
// second child resumes from the shared SQLite keystore and sends what was
// pending, with the same ID.
func TestCrashBetweenOutboxAndAnswer(t *testing.T) { convcrash.BetweenOutboxAndAnswer(t) }

// TestCrashSDKChosenIDs: an app that lets the SDK choose its message IDs
// is SIGKILLed at random moments of Send, at least 100 times, and
// restarted on the same SQLite keystore each time; it loses no message and
// sends none twice (PA-7.3-03, PA-7.3-04). keystore/pgstore's
// TestConversationCrashSDKChosenIDs is the same on PostgreSQL.
func TestCrashSDKChosenIDs(t *testing.T) { convcrash.SDKChosenIDs(t, nil) }

// TestCheckpointCrash: a child reading a 600-event conversation with
// Checkpoint.Events 50 (and another with 1) is killed in the loop body of
// event 437; a second child reads on from the cursor on disk (SQLite). The
// second yields nothing the saved cursor covers, and again exactly the
// events after it up to the one in flight, each with its ID: at most 50
// (exactly 1 with a checkpoint per event). Nothing is lost.
func TestCheckpointCrash(t *testing.T) { convcrash.CheckpointCrash(t, openCrashStore) }
