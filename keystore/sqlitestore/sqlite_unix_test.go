//go:build unix

package sqlitestore_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// withUmask0 runs the test with umask 0, so that the modes it sees are the
// ones the store chose, not ones the umask happened to remove bits from.
func withUmask0(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
}

func wantMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %v; want %v", filepath.Base(path), got, want)
	}
}

// PA-4.8-07: a new database, its -wal and -shm files and its lock files are
// readable by their owner only.
func TestSQLiteFileModes(t *testing.T) {
	withUmask0(t)
	dir := filepath.Join(t.TempDir(), "poppy")
	path := filepath.Join(dir, "keystore.db")
	s := openSQLite(t, path)
	set(t, s, dana, "pat_1")
	wantMode(t, dir, 0o700)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, p, 0o600)
	}
	wantMode(t, s.LockDir(), 0o700)
	entries, err := os.ReadDir(s.LockDir())
	if err != nil || len(entries) == 0 {
		t.Fatalf("lock files: %v, %v; want one", entries, err)
	}
	for _, e := range entries {
		wantMode(t, filepath.Join(s.LockDir(), e.Name()), 0o600)
	}
}

// OpenSQLite tightens a database and its files that others can read.
func TestSQLiteTightensModes(t *testing.T) {
	withUmask0(t)
	path := filepath.Join(t.TempDir(), "keystore.db")
	first := openSQLite(t, path) // keeps the -wal and -shm files in place
	set(t, first, dana, "pat_1")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(first.LockDir(), 0o777); err != nil {
		t.Fatal(err)
	}

	second := openSQLite(t, path)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, p, 0o600)
	}
	wantMode(t, second.LockDir(), 0o700)
	wantValue(t, second, dana, "pat_1")
}

// Creating the database (under a temporary name, then linked into place)
// leaves nothing else next to it.
func TestSQLiteLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	openSQLite(t, filepath.Join(dir, "keystore.db"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "keystore.db", "keystore.db-wal", "keystore.db-shm", "keystore.db-locks":
		default:
			t.Errorf("unexpected file %s next to the database", e.Name())
		}
	}
}
