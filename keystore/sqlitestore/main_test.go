package sqlitestore_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

// envTestDB names the SQLite file that child processes open.
const envTestDB = "POPPY_KEYSTORE_TEST_DB"

func TestMain(m *testing.M) {
	// Child processes of storetest.MultiProcess and storetest.Crash, and of
	// the SQLite tests, do their part and exit here.
	storetest.ChildMain(func() (keystore.Store, error) {
		return sqlitestore.Open(os.Getenv(envTestDB), nil)
	})
	sqliteChildMain()
	benchChildMain()

	goleak.VerifyTestMain(m)
}
