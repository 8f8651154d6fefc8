package sqlitestore_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/internal/testenv/convbench"
	"github.com/poppyproto/poppy/internal/testenv/convcrash"
	"github.com/poppyproto/poppy/internal/testenv/opcrash"
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
	// The children of package conversation's, package operations' and the
	// root package's tests that run here.
	convcrash.ChildMain(openCrashStore)
	opcrash.ChildMain(openOpCrashStore)
	testenv.RotationChildMain(func(path string) (keystore.Store, error) { return sqlitestore.Open(path, nil) })
	testenv.ReplicaChildMain(func(path string) (keystore.Store, error) { return sqlitestore.Open(path, nil) })
	benchChildMain()
	convbench.ChildMain()

	goleak.VerifyTestMain(m)
}
