package pgstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/poppyproto/poppy/internal/testenv/convcrash"
	"github.com/poppyproto/poppy/keystore/pgstore"
)

// envConvTable names the table the conversation crash test's children open.
const envConvTable = "POPPY_PGSTORE_TEST_CONV_TABLE"

// openConvCrashStore is the keystore of the conversation crash test's
// children: the parent's table.
func openConvCrashStore(string) (convcrash.Store, error) {
	return pgstore.Open(context.Background(), os.Getenv(urlEnv), &pgstore.Options{Table: os.Getenv(envConvTable)})
}

// TestConversationCrashSDKChosenIDs is package conversation's SIGKILL test
// on PostgreSQL: an app that lets the SDK choose its message IDs, killed
// at random moments of Send at least 100 times and restarted on the same
// table, loses no message and sends none twice (PA-7.3-03, PA-7.3-04).
func TestConversationCrashSDKChosenIDs(t *testing.T) {
	pool := testPool(t)
	convcrash.SDKChosenIDs(t, []string{envConvTable + "=" + testTable(t, pool)})
}
