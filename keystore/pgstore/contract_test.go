package pgstore_test

import (
	"context"
	"encoding/hex"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/internal/testenv/convcrash"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/pgstore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

// Environment variables from a test to the child processes of
// storetest.MultiProcess and storetest.Crash, and of the benchmarks.
const (
	envTable     = "POPPY_PGSTORE_TEST_TABLE"      // the table the children open
	envSealerKey = "POPPY_PGSTORE_TEST_SEALER_KEY" // hex AES-256 key, if the store seals
)

func TestMain(m *testing.M) {
	storetest.ChildMain(openChildStore)
	convcrash.ChildMain(openConvCrashStore)
	testenv.RotationChildMain(func(table string) (keystore.Store, error) {
		return pgstore.Open(context.Background(), os.Getenv(urlEnv), &pgstore.Options{Table: table})
	})
	testenv.ReplicaChildMain(openReplicaStore)
	benchChildMain()
	goleak.VerifyTestMain(realtest.Main(m)) // one line per missing real component
}

// openChildStore opens, in a child process, the store its parent test uses.
func openChildStore() (keystore.Store, error) {
	opts := &pgstore.Options{Table: os.Getenv(envTable)}
	if k := os.Getenv(envSealerKey); k != "" {
		key, err := hex.DecodeString(k)
		if err != nil {
			return nil, err
		}
		if opts.Sealer, err = keystore.NewAESGCMSealer(key); err != nil {
			return nil, err
		}
	}
	return pgstore.Open(context.Background(), os.Getenv(urlEnv), opts)
}

// sharedStore returns a store on a table of the test's own, and the
// environment a child process needs to open the same store.
func sharedStore(t *testing.T, sealed bool) (*pgstore.Store, map[string]string) {
	t.Helper()
	pool := testPool(t)
	env := map[string]string{envTable: testTable(t, pool)}
	opts := &pgstore.Options{Table: env[envTable]}
	if sealed {
		key := randomKey()
		env[envSealerKey] = hex.EncodeToString(key)
		opts.Sealer = sealerOf(t, key)
	}
	return newStore(t, pool, opts), env
}

func TestContract(t *testing.T) {
	s, _ := sharedStore(t, false)
	storetest.Run(t, func(*testing.T) keystore.Store { return s })
}

func TestContractSealed(t *testing.T) {
	s, _ := sharedStore(t, true)
	storetest.Run(t, func(*testing.T) keystore.Store { return s })
}

// Each test opens a store per subtest on one table, as replicas would.
func TestContractStorePerSubtest(t *testing.T) {
	table := testTable(t, testPool(t))
	storetest.Run(t, func(t *testing.T) keystore.Store {
		s, err := pgstore.Open(context.Background(), testURL(t), &pgstore.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// Two OS processes increment one record 200 times each: exactly 400.
func TestMultiProcess(t *testing.T) {
	s, env := sharedStore(t, false)
	storetest.MultiProcess(t, s, env, &storetest.MultiProcessOptions{Processes: 2, Rounds: 200})
}

func TestMultiProcessSealed(t *testing.T) {
	s, env := sharedStore(t, true)
	storetest.MultiProcess(t, s, env, &storetest.MultiProcessOptions{Processes: 2, Rounds: 200})
}

// A process killed while it holds the lock, or while it writes, leaves the
// previous value and no lock behind.
func TestCrash(t *testing.T) {
	s, env := sharedStore(t, false)
	storetest.Crash(t, s, env)
}

// Two OS processes sharing one PostgreSQL store renew Sessions with one
// Account Token that the fake Company rotates on every use, 200 times each:
// no Account Token is lost and no refresh is refused (spec 4.8).
func TestTwoProcessesRotatingAccountToken(t *testing.T) {
	s, env := sharedStore(t, false)
	testenv.RotationRace(t, s, env[envTable], 200)
}

// A caller that gives up after the Company rotated the Account Token, or
// used up a sign-in's code, and before the SDK read the answer, with the
// Session kept in PostgreSQL: the User stays signed in (PA-4.8-04;
// PA-4.5-10 and PA-4.6-08 for the sign-in completions; internal/testenv's
// CallerGivesUp).
func TestPA_4_8_04_CallerGivesUpPostgreSQL(t *testing.T) {
	pool := testPool(t)
	testenv.CallerGivesUp(t, func(t *testing.T) keystore.Store {
		return newStore(t, pool, &pgstore.Options{Table: testTable(t, pool)})
	})
}
