package keyring

// These tests use the real OS keyring, never go-keyring's MockInit. On Linux
// that needs a D-Bus session bus with a Secret Service on it, as .ci/run
// provides:
//
//	dbus-run-session -- sh -c 'echo pw | gnome-keyring-daemon --unlock --components=secrets >/dev/null; go test ./keystore/keyring/'
//
// Without one the tests skip, saying what is missing, unless
// POPPY_TEST_REAL=1, in which case they fail. Each test uses a keyring
// service of its own and deletes its items when it ends.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	gokeyring "github.com/zalando/go-keyring"
	"go.uber.org/goleak"

	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

// Environment variables from a test to the child processes of
// storetest.MultiProcess and storetest.Crash.
const (
	envService = "POPPY_KEYRING_TEST_SERVICE"
	envLockDir = "POPPY_KEYRING_TEST_LOCKDIR"
)

func TestMain(m *testing.M) {
	storetest.ChildMain(func() (keystore.Store, error) {
		return New(&Options{Service: os.Getenv(envService), LockDir: os.Getenv(envLockDir)})
	})
	// godbus keeps its shared session bus connection, and the goroutines
	// serving it, for the life of the process.
	goleak.VerifyTestMain(realtest.Main(m), // one line per missing real component
		goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.newConn.func1"),
		goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.(*Conn).inWorker"),
		goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.(*Conn).outWorker"),
	)
}

// requireKeyring skips the test, or fails it under POPPY_TEST_REAL=1, when
// no OS keyring answers.
func requireKeyring(t testing.TB) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		realtest.Missing(t, "the OS keyring", what+" (run the tests inside dbus-run-session with gnome-keyring-daemon --unlock --components=secrets, as .ci/run does)")
	}
	if runtime.GOOS == "linux" && os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
		// Without it godbus would try to autolaunch a bus with dbus-launch.
		missing("no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is not set")
	}
	s := &Store{service: "poppy-test-ping"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		missing("the OS keyring (on Linux, a Secret Service on the D-Bus session bus) is missing or locked: " + err.Error())
	}
}

// testStore returns a store on a keyring service and lock directory of the
// test's own, whose items are deleted when the test ends.
func testStore(t testing.TB) *Store {
	t.Helper()
	requireKeyring(t)
	b := make([]byte, 6)
	rand.Read(b)
	service := "poppy-test-" + hex.EncodeToString(b)
	s, err := New(&Options{Service: service, LockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gokeyring.DeleteAll(service); err != nil {
			t.Errorf("deleting the test's keyring items: %v", err)
		}
	})
	return s
}

func TestContract(t *testing.T) {
	s := testStore(t)
	storetest.Run(t, func(*testing.T) keystore.Store { return s })
}

// Two OS processes increment one record 200 times each: exactly 400.
func TestMultiProcess(t *testing.T) {
	s := testStore(t)
	storetest.MultiProcess(t, s, map[string]string{envService: s.service, envLockDir: s.lockDir},
		&storetest.MultiProcessOptions{Processes: 2, Rounds: 200})
}

func TestCrash(t *testing.T) {
	s := testStore(t)
	storetest.Crash(t, s, map[string]string{envService: s.service, envLockDir: s.lockDir})
}

var testKey = keystore.Key{Kind: keystore.KindDPoPKey, User: "alice", Issuer: "https://auth.example.com", ID: "k1"}

func put(t testing.TB, s keystore.Store, key keystore.Key, value []byte) {
	t.Helper()
	if err := s.Update(context.Background(), key, func([]byte) ([]byte, error) { return value, nil }); err != nil {
		t.Fatalf("Update(%s): %v", key, err)
	}
}

func get(t *testing.T, s keystore.Store, key keystore.Key) []byte {
	t.Helper()
	v, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return v
}

// item reads one keyring item directly, "" if there is none.
func item(t *testing.T, s *Store, account string) string {
	t.Helper()
	v, err := gokeyring.Get(s.service, account)
	if errors.Is(err, gokeyring.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("keyring item %s: %v", account, err)
	}
	return v
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// A 10 KiB value, more than any platform's item limit, round-trips in
// chunks no larger than the limit, and the chunks go when it shrinks or is
// deleted.
func TestChunking(t *testing.T) {
	s := testStore(t)
	account := recordAccount(testKey)
	value := randomBytes(10 << 10)
	put(t, s, testKey, value)
	if got := get(t, s, testKey); !bytes.Equal(got, value) {
		t.Fatalf("10 KiB value came back as %d different bytes", len(got))
	}
	h, ok := parseChunked(item(t, s, account))
	if !ok {
		t.Fatalf("the record's item is not chunked: %.40q", item(t, s, account))
	}
	limit := platformLimit(s.service, account)
	if want := (len(value)*4/3 + limit) / limit; h.chunks < want {
		t.Fatalf("%d chunks; want at least %d", h.chunks, want)
	}
	for i := range h.chunks {
		c := item(t, s, chunkAccount(account, h.slot, i))
		if c == "" || len(c) > limit {
			t.Fatalf("chunk %d holds %d bytes; want 1 to %d", i, len(c), limit)
		}
	}
	if item(t, s, chunkAccount(account, h.slot, h.chunks)) != "" {
		t.Fatal("a chunk beyond the count exists")
	}

	// Rewritten unchanged: nothing is written, so the slot stays.
	put(t, s, testKey, bytes.Clone(value))
	if again, _ := parseChunked(item(t, s, account)); again.slot != h.slot {
		t.Fatal("an Update that changed nothing rewrote the record")
	}

	// Replaced by another large value: the other slot, the old chunks gone.
	value2 := randomBytes(12 << 10)
	put(t, s, testKey, value2)
	if got := get(t, s, testKey); !bytes.Equal(got, value2) {
		t.Fatal("second large value did not round-trip")
	}
	h2, _ := parseChunked(item(t, s, account))
	if h2.slot == h.slot {
		t.Fatalf("both writes used slot %c; a write must not overwrite the chunks the current value uses", h.slot)
	}
	for i := range h.chunks {
		if item(t, s, chunkAccount(account, h.slot, i)) != "" {
			t.Fatalf("old chunk %c%d left behind", h.slot, i)
		}
	}

	// Replaced by a small value: inline, chunks gone.
	put(t, s, testKey, []byte("small"))
	if !strings.HasPrefix(item(t, s, account), inlinePrefix) {
		t.Fatal("a small value is not held inline")
	}
	for i := range h2.chunks {
		if item(t, s, chunkAccount(account, h2.slot, i)) != "" {
			t.Fatalf("chunk %c%d left behind by a small value", h2.slot, i)
		}
	}

	// Deleted: nothing left.
	put(t, s, testKey, randomBytes(10<<10))
	h3, _ := parseChunked(item(t, s, account))
	put(t, s, testKey, nil)
	if item(t, s, account) != "" {
		t.Fatal("the record's item survived a delete")
	}
	for i := range h3.chunks {
		if item(t, s, chunkAccount(account, h3.slot, i)) != "" {
			t.Fatalf("chunk %d survived a delete", i)
		}
	}
}

// Many tiny chunks, to exercise chunk boundaries.
func TestManySmallChunks(t *testing.T) {
	s := testStore(t)
	s.chunkLimit = 16
	for _, n := range []int{0, 1, 11, 12, 13, 300} {
		v := randomBytes(n)
		put(t, s, testKey, v)
		if got := get(t, s, testKey); !bytes.Equal(got, v) {
			t.Fatalf("%d bytes in 16-byte chunks came back different", n)
		}
	}
}

// Get takes no lock: it must never return a value made of two writes' chunks.
func TestGetDuringWrites(t *testing.T) {
	s := testStore(t)
	s.chunkLimit = 64 // many chunks, so a read overlaps writes
	a := bytes.Repeat([]byte("A"), 600)
	b := bytes.Repeat([]byte("B"), 600)
	put(t, s, testKey, a)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := a
			if i%2 == 0 {
				v = b
			}
			if err := s.Update(ctx, testKey, func([]byte) ([]byte, error) { return v, nil }); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 20 {
		got, err := s.Get(ctx, testKey)
		if err != nil {
			t.Error(err)
			break
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			t.Errorf("Get during writes returned a mixed value: %.80q", got)
			break
		}
	}
	close(stop)
	wg.Wait()
}

func TestIndex(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	idx := indexAccount(testKey.Kind, testKey.User, testKey.Issuer)
	var keys []keystore.Key
	for _, id := range []string{"b", "a", "c"} {
		k := testKey
		k.ID = id
		keys = append(keys, k)
		put(t, s, k, []byte(id))
	}
	got, err := s.List(ctx, testKey.Kind, testKey.User, testKey.Issuer)
	if err != nil || len(got) != 3 || got[0].ID != "a" || got[2].ID != "c" {
		t.Fatalf("List = %v, %v", got, err)
	}
	// Rewriting a record does not touch the index.
	before := item(t, s, idx)
	put(t, s, keys[0], []byte("again"))
	if item(t, s, idx) != before {
		t.Fatal("rewriting a record changed the index")
	}
	for _, k := range keys {
		put(t, s, k, nil)
	}
	if item(t, s, idx) != "" {
		t.Fatal("the index item outlived the last record")
	}
}

// An index too large for one item is chunked like a record.
func TestLargeIndex(t *testing.T) {
	s := testStore(t)
	s.chunkLimit = 100
	for i := range 20 {
		k := testKey
		k.ID = strings.Repeat("x", 10) + string(rune('a'+i))
		put(t, s, k, []byte{byte(i)})
	}
	got, err := s.List(context.Background(), testKey.Kind, testKey.User, testKey.Issuer)
	if err != nil || len(got) != 20 {
		t.Fatalf("List = %d keys, %v; want 20", len(got), err)
	}
	if _, ok := parseChunked(item(t, s, indexAccount(testKey.Kind, testKey.User, testKey.Issuer))); !ok {
		t.Fatal("a large index is not chunked")
	}
}

// Lock files hold no User names, are private, and go with their record.
func TestLockFiles(t *testing.T) {
	s := testStore(t)
	put(t, s, testKey, []byte("v"))
	info, err := os.Stat(s.lockDir)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(s.lockDir)
	if len(entries) == 0 {
		t.Fatal("no lock file")
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), "alice") {
			t.Errorf("lock file %s names the User", e.Name())
		}
		fi, err := os.Stat(filepath.Join(s.lockDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
			t.Errorf("lock file mode %v; want 0600", fi.Mode().Perm())
		}
	}
	_ = info
	put(t, s, testKey, nil)
	if entries, _ := os.ReadDir(s.lockDir); runtime.GOOS != "windows" && len(entries) != 0 {
		t.Fatalf("%d lock files left after the record was deleted", len(entries))
	}
}

func TestDefaultLockDirIsPrivate(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	t.Setenv("LocalAppData", cache)
	s, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.service != DefaultService || !strings.HasPrefix(s.lockDir, cache) {
		t.Fatalf("defaults: service %q, lock dir %q", s.service, s.lockDir)
	}
	fi, err := os.Stat(s.lockDir)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o700 {
		t.Fatalf("lock dir mode %v; want 0700", fi.Mode().Perm())
	}
}

// Account names keep the parts of a Key apart.
func TestAccountNames(t *testing.T) {
	k := keystore.Key{Kind: "a/b", User: "c", Issuer: "https://x/y", ID: "%2F"}
	got := recordAccount(k)
	if want := "r/a%2Fb/c/https:%2F%2Fx%2Fy/%252F"; got != want {
		t.Fatalf("recordAccount = %q; want %q", got, want)
	}
	k2 := keystore.Key{Kind: "a", User: "b/c", Issuer: "https://x/y", ID: "%2F"}
	if recordAccount(k2) == got {
		t.Fatal("two keys share an account")
	}
}

// benchValue is about the size of a Session record: an ID and a token.
var benchValue = bytes.Repeat([]byte("x"), 512)

func BenchmarkGet(b *testing.B) {
	s := testStore(b)
	put(b, s, testKey, benchValue)
	for b.Loop() {
		if _, err := s.Get(b.Context(), testKey); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpdate(b *testing.B) {
	s := testStore(b)
	for b.Loop() {
		err := s.Update(b.Context(), testKey, func([]byte) ([]byte, error) { return benchValue, nil })
		if err != nil {
			b.Fatal(err)
		}
	}
}

// A 10 KiB value takes five chunks on Linux and Windows.
func BenchmarkUpdateChunked(b *testing.B) {
	s := testStore(b)
	v := bytes.Repeat([]byte("x"), 10<<10)
	for b.Loop() {
		err := s.Update(b.Context(), testKey, func([]byte) ([]byte, error) { return v, nil })
		if err != nil {
			b.Fatal(err)
		}
	}
}
