package sqlitestore_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

// openSQLite opens the store at path and closes it when the test ends.
func openSQLite(t testing.TB, path string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

var dana = keystore.Key{Kind: keystore.KindAccountToken, User: "dana", Issuer: "https://auth.example.com"}

func set(t *testing.T, s keystore.Store, key keystore.Key, v string) {
	t.Helper()
	if err := s.Update(t.Context(), key, func([]byte) ([]byte, error) { return []byte(v), nil }); err != nil {
		t.Fatal(err)
	}
}

func wantValue(t *testing.T, s keystore.Store, key keystore.Key, want string) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil || string(got) != want {
		t.Fatalf("Get(%s) = %q, %v; want %q", key, got, err, want)
	}
}

func TestSQLiteContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		return openSQLite(t, filepath.Join(t.TempDir(), "keystore.db"))
	})
}

// Every subtest opens another handle on one file that keeps the records of
// the subtests before it, as a store that can't be emptied would.
func TestSQLiteContractSharedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	storetest.Run(t, func(t *testing.T) keystore.Store {
		return openSQLite(t, path)
	})
}

// twoHandles is a Store that sends each call to one of two handles on one
// SQLite file in turn. The handles share no in-process lock, so the suite's
// lock tests run against the lock files, as between two processes.
type twoHandles struct {
	h [2]*sqlitestore.Store
	n atomic.Uint32
}

func (s *twoHandles) next() *sqlitestore.Store { return s.h[s.n.Add(1)%2] }
func (s *twoHandles) Get(ctx context.Context, key keystore.Key) ([]byte, error) {
	return s.next().Get(ctx, key)
}
func (s *twoHandles) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	return s.next().Update(ctx, key, fn)
}
func (s *twoHandles) List(ctx context.Context, kind keystore.Kind, user, issuer string) ([]keystore.Key, error) {
	return s.next().List(ctx, kind, user, issuer)
}

func TestSQLiteContractTwoHandles(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		path := filepath.Join(t.TempDir(), "keystore.db")
		return &twoHandles{h: [2]*sqlitestore.Store{openSQLite(t, path), openSQLite(t, path)}}
	})
}

// Two processes each increment one record 200 times: exactly 400.
func TestSQLiteMultiProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	s := openSQLite(t, path)
	storetest.MultiProcess(t, s, map[string]string{envTestDB: path}, &storetest.MultiProcessOptions{Processes: 2, Rounds: 200})
}

// A process killed in fn or while writing leaves the previous value and no
// lock behind.
func TestSQLiteCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	s := openSQLite(t, path)
	storetest.Crash(t, s, map[string]string{envTestDB: path})
}

// A process killed after its write statement and before COMMIT leaves the
// previous value: the write is one transaction.
func TestSQLiteCrashBeforeCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	s := openSQLite(t, path)
	set(t, s, dana, "old")

	c := startSQLiteChild(t, "crash-before-commit", path)
	c.expect(t, "committing")
	c.kill(t)

	wantValue(t, s, dana, "old")
	if res, err := s.IntegrityCheck(t.Context()); err != nil || res != "ok" {
		t.Fatalf("integrity_check = %q, %v", res, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Update(ctx, dana, func([]byte) ([]byte, error) { return []byte("after"), nil }); err != nil {
		t.Fatalf("Update after the crash: %v", err)
	}
	wantValue(t, s, dana, "after")
	// A new handle, as a restarted process would open, sees the same.
	wantValue(t, openSQLite(t, path), dana, "after")
}

// Several processes open a new file at once: all succeed, the schema is
// created once, and every one of their writes is kept.
func TestSQLiteConcurrentOpenProcesses(t *testing.T) {
	const n = 4
	path := filepath.Join(t.TempDir(), "keystore.db")
	var children []*sqliteChild
	for range n {
		children = append(children, startSQLiteChild(t, "open-fresh", path))
	}
	for _, c := range children {
		c.expect(t, "ready")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("database exists before the children open it: %v", err)
	}
	for _, c := range children {
		c.send(t, "go")
	}
	for _, c := range children {
		c.expect(t, "done")
		c.wait(t)
	}
	wantValue(t, openSQLite(t, path), dana, strconv.Itoa(n))
	if v := userVersion(t, path); v != 1 {
		t.Fatalf("user_version = %d; want 1", v)
	}
}

// Goroutines opening one new file at once behave like processes.
func TestSQLiteConcurrentOpenGoroutines(t *testing.T) {
	const n = 8
	path := filepath.Join(t.TempDir(), "keystore.db")
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			s, err := sqlitestore.Open(path, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			if err := s.Update(t.Context(), dana, increment); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	wantValue(t, openSQLite(t, path), dana, strconv.Itoa(n))
}

func increment(current []byte) ([]byte, error) {
	n, _ := strconv.Atoi(string(current))
	return []byte(strconv.Itoa(n + 1)), nil
}

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// execRaw runs stmt on the database at path outside the store.
func execRaw(t *testing.T, path, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
}

func TestSQLiteReopenKeepsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	s, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, dana, "token")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantValue(t, openSQLite(t, path), dana, "token")
	if v := userVersion(t, path); v != 1 {
		t.Fatalf("user_version = %d; want 1", v)
	}
}

func TestSQLiteRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keystore.db")
	openSQLite(t, path)
	execRaw(t, path, "PRAGMA user_version = 2")
	_, err := sqlitestore.Open(path, nil)
	if err == nil || !strings.Contains(err.Error(), "newer") || !strings.HasPrefix(err.Error(), "sqlitestore: ") {
		t.Fatalf("OpenSQLite of a version 2 schema = %v; want an error saying it is newer", err)
	}
}

func TestSQLiteRefusesOtherDatabases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	execRaw(t, path, "PRAGMA application_id = 42")
	_, err := sqlitestore.Open(path, nil)
	if err == nil || !strings.Contains(err.Error(), "not a keystore") {
		t.Fatalf("OpenSQLite of another program's database = %v; want an error", err)
	}
}

// Paths with characters that mean something in a URI work.
func TestSQLiteOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir?x=1#frag%20")
	path := filepath.Join(dir, "key store.db")
	s := openSQLite(t, path)
	set(t, s, dana, "v")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %q: %v", path, err)
	}
}

// Deleting a record removes its lock file, so records that come and go
// (pending sign-ins) leave nothing behind.
func TestSQLiteRemovesLockFiles(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "keystore.db"))
	lockFiles := func() int {
		t.Helper()
		entries, err := os.ReadDir(s.LockDir())
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	for i := range 10 {
		key := keystore.Key{Kind: keystore.KindPendingSignIn, User: "dana", Issuer: "https://auth.example.com", ID: strconv.Itoa(i)}
		set(t, s, key, "verifier")
		set(t, s, key, "") // an empty record still exists
		if err := s.Update(t.Context(), key, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := lockFiles(); n != 0 {
		t.Fatalf("%d lock files left after every record was deleted; want 0", n)
	}
	if n := s.Locks(); n != 0 {
		t.Fatalf("%d in-process locks left; want 0", n)
	}
}

// Errors never hold a value: here the write fails after fn returned a secret.
func TestSQLiteErrorsHoldNoValues(t *testing.T) {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "keystore.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "pat_SECRET_8Hk2Wq1"
	err = s.Update(t.Context(), dana, func([]byte) ([]byte, error) {
		s.Close()
		return []byte(secret), nil
	})
	if err == nil {
		t.Fatal("Update on a closed store succeeded")
	}
	if strings.Contains(err.Error(), secret) || !strings.HasPrefix(err.Error(), "sqlitestore: ") {
		t.Fatalf("error %q; want it to start with sqlitestore: and hold no value", err)
	}
	if _, err := s.Get(t.Context(), dana); err == nil || !strings.HasPrefix(err.Error(), "sqlitestore: ") {
		t.Fatalf("Get on a closed store = %v; want an error starting with keystore:", err)
	}
}

func TestDefaultPath(t *testing.T) {
	dir, err := os.UserConfigDir()
	if err != nil {
		t.Skipf("no user config directory: %v", err)
	}
	got, err := sqlitestore.DefaultPath()
	if want := filepath.Join(dir, "poppy", "keystore.db"); err != nil || got != want {
		t.Fatalf("DefaultPath() = %q, %v; want %q", got, err, want)
	}
}

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "keystore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Programs usually open sqlitestore.DefaultPath().
	store, err := sqlitestore.Open(filepath.Join(dir, "keystore.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	key := keystore.Key{Kind: keystore.KindAccountToken, User: "dana", Issuer: "https://auth.example.com"}
	if err := store.Update(ctx, key, func([]byte) ([]byte, error) { return []byte("pat_1"), nil }); err != nil {
		log.Fatal(err)
	}

	// Renewing a rotating Account Token: fn runs under a lock on the key
	// that holds across processes, so another process that wants to renew
	// too waits, then gets the rotated token in current (spec 4.8).
	err = store.Update(ctx, key, func(current []byte) ([]byte, error) {
		rotated := renew(current) // a token request, which may rotate the token
		return rotated, nil
	})
	if err != nil {
		log.Fatal(err)
	}

	keys, err := store.List(ctx, keystore.KindAccountToken, "dana", "https://auth.example.com")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(keys)
	// Output:
	// [account_token/dana@https://auth.example.com#]
}

func renew(token []byte) []byte { return []byte("pat_2") }

// A child process for the SQLite tests, which started it with
// POPPY_KEYSTORE_TEST_CHILD naming its part and envTestDB its database.

const envSQLiteChild = "POPPY_KEYSTORE_TEST_CHILD"

// sqliteChildMain does the part of a child process and exits, or returns at
// once in the test process.
func sqliteChildMain() {
	part := os.Getenv(envSQLiteChild)
	if part == "" {
		return
	}
	if err := runSQLiteChild(part, os.Getenv(envTestDB)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runSQLiteChild(part, path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch part {
	case "crash-before-commit":
		s, err := sqlitestore.Open(path, nil)
		if err != nil {
			return err
		}
		s.SetBeforeCommit(func() {
			fmt.Println("committing")
			<-ctx.Done() // until killed
		})
		return s.Update(ctx, dana, func([]byte) ([]byte, error) { return []byte("new"), nil })

	case "open-fresh":
		fmt.Println("ready")
		if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
			return fmt.Errorf("waiting for go: %q, %v", line, err)
		}
		s, err := sqlitestore.Open(path, nil)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.Update(ctx, dana, increment); err != nil {
			return err
		}
		fmt.Println("done")
		return nil
	}
	return fmt.Errorf("unknown part %q", part)
}

type sqliteChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	done   bool
}

func startSQLiteChild(t *testing.T, part, path string) *sqliteChild {
	t.Helper()
	c := &sqliteChild{lines: make(chan string, 4)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), envSQLiteChild+"="+part, envTestDB+"="+path)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if !c.done {
			c.cmd.Process.Kill()
			c.finish()
		}
	})
	return c
}

func (c *sqliteChild) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			err := c.finish()
			t.Fatalf("child ended (%v) before printing %q; stderr:\n%s", err, want, &c.stderr)
		}
		if line != want {
			t.Fatalf("child printed %q; want %q", line, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("child printed nothing for a minute; want %q", want)
	}
}

func (c *sqliteChild) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *sqliteChild) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	c.finish()
}

func (c *sqliteChild) wait(t *testing.T) {
	t.Helper()
	if err := c.finish(); err != nil {
		t.Fatalf("child: %v; stderr:\n%s", err, &c.stderr)
	}
}

func (c *sqliteChild) finish() error {
	c.stdin.Close()
	for range c.lines {
	}
	c.done = true
	return c.cmd.Wait()
}
