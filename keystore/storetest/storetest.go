// Package storetest checks that a [keystore.Store] keeps the keystore
// contract. Every store in this module passes it; a third-party store should
// too.
//
// [Run] runs the contract suite in one process:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) keystore.Store {
//			s, err := mystore.Open(...)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Each subtest writes only records of its own, under a User and issuer made
// up for it, so open may return a new empty store or the same shared one
// (a database that is never emptied, an OS keyring) every time. Records the
// suite writes may be left behind.
//
// # Between processes
//
// A store that several processes share must also keep the contract between
// them. [MultiProcess] and [Crash] check that with real OS processes: they run
// the test binary again as children, which open the same store and update
// one record. For that to work, the package's TestMain must call [ChildMain]
// before anything else, with a function that opens the store the way the
// test does; the test passes what that function needs (a file path, a
// database URL) in environment variables:
//
//	func TestMain(m *testing.M) {
//		storetest.ChildMain(func() (keystore.Store, error) {
//			return mystore.Open(os.Getenv("MYSTORE_TEST_PATH"))
//		})
//		os.Exit(m.Run())
//	}
//
//	func TestMultiProcess(t *testing.T) {
//		path := filepath.Join(t.TempDir(), "store")
//		s := open(t, path)
//		storetest.MultiProcess(t, s, map[string]string{"MYSTORE_TEST_PATH": path}, nil)
//	}
//
// In the test process ChildMain returns at once; in a child it does the
// child's part and exits.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
)

// waitLimit bounds every wait in the suite that should end at once when the
// store is correct, so that a store that blocks fails instead of hanging.
const waitLimit = 10 * time.Second

// Run runs the contract suite against the stores that open returns, calling
// it once for each subtest. See the package documentation.
//
// The suite checks what [keystore.Store] promises, and spells out a few
// points the interface leaves implicit:
//
//   - Get of a missing record fails with an error matching ErrNotFound; a key
//     with no kind, User or issuer is an error (not ErrNotFound, not a panic)
//     for Get, Update and List.
//   - Update calls fn exactly once, with nil for a missing record; a nil
//     result deletes, an empty non-nil result is a record whose value is
//     empty (not nil); fn's error is returned (errors.Is) and nothing is
//     written.
//   - Records are isolated by every field of the Key, compared byte for byte:
//     case, trailing spaces and Unicode normalization all make keys differ,
//     and no separator character makes two keys one.
//   - List returns the IDs of one kind, User and issuer in byte order (Go's
//     string order, not a locale's collation).
//   - Values hold any bytes, up to 64 KiB at least, and are copied in and
//     out.
//   - Update locks its key only: 50 goroutines × 20 increments of one record
//     give exactly 1000; an Update of another key goes ahead while fn holds
//     one; a waiter gets the holder's result (the rotated-token case, spec
//     4.8).
//   - ctx: done before Update, nothing happens; done while waiting for the
//     lock, Update returns ctx's error without calling fn; done while fn
//     runs, fn's result is still written, since fn may have used a rotating
//     token whose successor is only in that result.
//   - A panic in fn leaves the record unchanged and the key unlocked.
func Run(t *testing.T, open func(t *testing.T) keystore.Store) {
	t.Helper()
	tests := []struct {
		name string
		f    func(t *testing.T, s keystore.Store, n namespace)
	}{
		{"GetMissing", testGetMissing},
		{"CreateReplaceDelete", testCreateReplaceDelete},
		{"EmptyValue", testEmptyValue},
		{"FnErrorWritesNothing", testFnError},
		{"FnCalledOnce", testFnCalledOnce},
		{"FnGetsNilForMissing", testFnGetsNil},
		{"Isolation", testIsolation},
		{"List", testList},
		{"BinaryAndLargeValues", testBinaryValues},
		{"ValuesAreCopied", testCopies},
		{"InvalidKeys", testInvalidKeys},
		{"ConcurrentIncrements", testConcurrentIncrements},
		{"LockIsPerKey", testLockIsPerKey},
		{"WaiterReadsHolderResult", testWaiterReadsHolderResult},
		{"CtxWhileWaiting", testCtxWhileWaiting},
		{"CtxDoneBeforeUpdate", testCtxDoneBefore},
		{"CtxDoneDuringFnStillWrites", testCtxDoneDuringFn},
		{"PanicInFnReleasesLock", testPanicInFn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f(t, open(t), newNamespace(t))
		})
	}
}

// namespace is a User and an issuer no other subtest or run uses.
type namespace struct {
	user, issuer string
}

func newNamespace(t *testing.T) namespace {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	r := hex.EncodeToString(b)
	return namespace{
		user:   "storetest-" + r,
		issuer: "https://auth-" + r + ".storetest.invalid",
	}
}

func (n namespace) key(kind keystore.Kind, id string) keystore.Key {
	return keystore.Key{Kind: kind, User: n.user, Issuer: n.issuer, ID: id}
}

var errFn = errors.New("storetest: error from fn")

// set makes v the value of key.
func set(t *testing.T, s keystore.Store, key keystore.Key, v []byte) {
	t.Helper()
	err := s.Update(t.Context(), key, func([]byte) ([]byte, error) { return bytes.Clone(v), nil })
	if err != nil {
		t.Fatalf("Update(%s): %v", key, err)
	}
}

// wantValue checks that Get returns want for key.
func wantValue(t *testing.T, s keystore.Store, key keystore.Key, want []byte) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v; want a value of %d bytes", key, err, len(want))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%s) = %s; want %s", key, show(got), show(want))
	}
}

// wantMissing checks that Get finds no record for key.
func wantMissing(t *testing.T, s keystore.Store, key keystore.Key) {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("Get(%s) = %s, %v; want an error matching ErrNotFound", key, show(got), err)
	}
}

// show describes a test value briefly (the suite's values are not secrets).
func show(v []byte) string {
	switch {
	case v == nil:
		return "nil"
	case len(v) > 40:
		return fmt.Sprintf("%d bytes starting %q", len(v), v[:40])
	}
	return fmt.Sprintf("%q", v)
}

func increment(current []byte) ([]byte, error) {
	n := 0
	if current != nil {
		var err error
		if n, err = strconv.Atoi(string(current)); err != nil {
			return nil, fmt.Errorf("storetest: counter holds %q: %w", current, err)
		}
	}
	return []byte(strconv.Itoa(n + 1)), nil
}

// within calls f and returns its error, or fails the test if f does not
// return within waitLimit. Use it for calls that must not block, so that a
// store that blocks fails instead of hanging the test.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(waitLimit):
		t.Fatalf("%s did not return within %v", what, waitLimit)
		return nil
	}
}

// holdLock starts an Update of key whose fn waits until release is called and
// then returns result. It returns once fn is running, so the key is locked;
// done receives Update's error.
func holdLock(t *testing.T, s keystore.Store, key keystore.Key, result []byte) (release func(), done <-chan error) {
	t.Helper()
	entered := make(chan struct{})
	rel := make(chan struct{})
	errc := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		errc <- s.Update(context.WithoutCancel(t.Context()), key, func([]byte) ([]byte, error) {
			close(entered)
			<-rel
			return result, nil
		})
	}()
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	// Release even if the test fails first, so no goroutine is left behind.
	t.Cleanup(func() {
		release()
		<-finished
	})
	select {
	case <-entered:
	case err := <-errc:
		t.Fatalf("Update(%s) returned %v before calling fn", key, err)
	case <-time.After(waitLimit):
		t.Fatalf("Update(%s) did not call fn within %v", key, waitLimit)
	}
	return release, errc
}

func testGetMissing(t *testing.T, s keystore.Store, n namespace) {
	wantMissing(t, s, n.key(keystore.KindSession, "missing"))
	// A record with a neighbouring key does not make it found.
	set(t, s, n.key(keystore.KindSession, "present"), []byte("v"))
	wantMissing(t, s, n.key(keystore.KindSession, "missing"))
	wantMissing(t, s, n.key(keystore.KindSession, ""))
}

func testCreateReplaceDelete(t *testing.T, s keystore.Store, n namespace) {
	ctx := t.Context()
	key := n.key(keystore.KindAccountToken, "")
	steps := []struct {
		current []byte // what fn must get
		next    []byte // what it returns
	}{
		{nil, []byte("v1")},          // create
		{[]byte("v1"), []byte("v2")}, // replace
		{[]byte("v2"), nil},          // delete
		{nil, nil},                   // delete a missing record: nothing happens
		{nil, []byte("v3")},          // create again after a delete
	}
	for i, st := range steps {
		err := s.Update(ctx, key, func(current []byte) ([]byte, error) {
			if !bytes.Equal(current, st.current) || (current == nil) != (st.current == nil) {
				t.Errorf("step %d: fn got %s; want %s", i, show(current), show(st.current))
			}
			return st.next, nil
		})
		if err != nil {
			t.Fatalf("step %d: Update: %v", i, err)
		}
		if st.next == nil {
			wantMissing(t, s, key)
			if keys, err := s.List(ctx, key.Kind, key.User, key.Issuer); err != nil || len(keys) != 0 {
				t.Fatalf("step %d: after a delete, List = %v, %v; want no keys", i, keys, err)
			}
		} else {
			wantValue(t, s, key, st.next)
		}
	}
}

func testEmptyValue(t *testing.T, s keystore.Store, n namespace) {
	// Only nil deletes: an empty value is a record, and fn must be able to
	// tell it from a missing one.
	ctx := t.Context()
	key := n.key(keystore.KindCursor, "empty")
	set(t, s, key, []byte{})
	got, err := s.Get(ctx, key)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("Get of an empty record = %s, %v; want an empty, non-nil value", show(got), err)
	}
	err = s.Update(ctx, key, func(current []byte) ([]byte, error) {
		if current == nil || len(current) != 0 {
			t.Errorf("fn got %s for an empty record; want an empty, non-nil value", show(current))
		}
		return current, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.List(ctx, key.Kind, key.User, key.Issuer)
	if err != nil || !slices.Equal(keys, []keystore.Key{key}) {
		t.Fatalf("List = %v, %v; want [%s]", keys, err, key)
	}
}

func testFnError(t *testing.T, s keystore.Store, n namespace) {
	ctx := t.Context()
	key := n.key(keystore.KindAccountToken, "")
	set(t, s, key, []byte("old"))
	// fn returns a value and an error: the error wins and nothing is written.
	err := s.Update(ctx, key, func([]byte) ([]byte, error) { return []byte("new"), errFn })
	if !errors.Is(err, errFn) {
		t.Fatalf("Update = %v; want fn's error", err)
	}
	wantValue(t, s, key, []byte("old"))
	// An error does not delete either.
	err = s.Update(ctx, key, func([]byte) ([]byte, error) { return nil, errFn })
	if !errors.Is(err, errFn) {
		t.Fatalf("Update = %v; want fn's error", err)
	}
	wantValue(t, s, key, []byte("old"))
	// Nor create.
	missing := n.key(keystore.KindAccountToken, "missing")
	err = s.Update(ctx, missing, func([]byte) ([]byte, error) { return []byte("new"), errFn })
	if !errors.Is(err, errFn) {
		t.Fatalf("Update = %v; want fn's error", err)
	}
	wantMissing(t, s, missing)
}

func testFnCalledOnce(t *testing.T, s keystore.Store, n namespace) {
	key := n.key(keystore.KindSession, "once")
	for i, fn := range []func([]byte) ([]byte, error){
		func([]byte) ([]byte, error) { return []byte("a"), nil }, // create
		func([]byte) ([]byte, error) { return []byte("b"), nil }, // replace
		func([]byte) ([]byte, error) { return nil, errFn },       // fail
		func([]byte) ([]byte, error) { return nil, nil },         // delete
		func([]byte) ([]byte, error) { return nil, nil },         // delete nothing
	} {
		calls := 0
		err := s.Update(t.Context(), key, func(current []byte) ([]byte, error) {
			calls++
			return fn(current)
		})
		if err != nil && !errors.Is(err, errFn) {
			t.Fatalf("Update %d: %v", i, err)
		}
		if calls != 1 {
			t.Fatalf("Update %d called fn %d times; want 1", i, calls)
		}
	}
}

func testFnGetsNil(t *testing.T, s keystore.Store, n namespace) {
	key := n.key(keystore.KindDPoPKey, "")
	check := func(when string) {
		t.Helper()
		err := s.Update(t.Context(), key, func(current []byte) ([]byte, error) {
			if current != nil {
				t.Errorf("%s: fn got %s; want nil", when, show(current))
			}
			return nil, nil
		})
		if err != nil {
			t.Fatalf("%s: Update: %v", when, err)
		}
	}
	check("record never written")
	set(t, s, key, []byte("key"))
	set(t, s, key, nil)
	check("record deleted")
}

func testIsolation(t *testing.T, s keystore.Store, n namespace) {
	ctx := t.Context()
	var keys []keystore.Key
	for _, kind := range []keystore.Kind{
		keystore.KindUserID, keystore.KindDPoPKey, keystore.KindSession,
		keystore.KindAccountToken, keystore.KindCursor, keystore.KindPendingSignIn,
	} {
		keys = append(keys, n.key(kind, "a"))
	}
	k := n.key(keystore.KindSession, "a")
	with := func(f func(*keystore.Key)) keystore.Key {
		k := k
		f(&k)
		return k
	}
	keys = append(keys,
		with(func(k *keystore.Key) { k.ID = "" }),
		with(func(k *keystore.Key) { k.ID = "b" }),
		with(func(k *keystore.Key) { k.ID = "A" }),       // case matters
		with(func(k *keystore.Key) { k.ID = "a " }),      // trailing space matters
		with(func(k *keystore.Key) { k.ID = "\u00e9" }),  // é precomposed ...
		with(func(k *keystore.Key) { k.ID = "e\u0301" }), // ... and decomposed are two IDs
		with(func(k *keystore.Key) { k.User += "-2" }),
		with(func(k *keystore.Key) { k.User = "UPPER-" + n.user }),
		with(func(k *keystore.Key) { k.User = "upper-" + n.user }),
		with(func(k *keystore.Key) { k.Issuer += "/2" }),
		with(func(k *keystore.Key) { k.Issuer = n.issuer + ":443" }),
	)
	// Keys a store that joins the fields with a separator would confuse.
	for _, sep := range []string{"/", ":", "|", "@", "#", ".", "\t", "\n"} {
		keys = append(keys,
			with(func(k *keystore.Key) { k.User = n.user + sep + "x"; k.ID = "y" }),
			with(func(k *keystore.Key) { k.Issuer = "x" + sep + n.issuer; k.ID = "y" }),
			with(func(k *keystore.Key) { k.Issuer = n.issuer + sep + "x"; k.ID = "y" }),
			with(func(k *keystore.Key) { k.ID = "x" + sep + "y" }),
			with(func(k *keystore.Key) { k.Kind = keystore.Kind(string(k.Kind) + sep + "x") }),
		)
	}
	// kind/user@issuer#id, as Key.String prints it, is the same for these two.
	keys = append(keys,
		with(func(k *keystore.Key) { k.Issuer = n.issuer + "#x"; k.ID = "" }),
		with(func(k *keystore.Key) { k.ID = "x#" }),
	)
	seen := map[keystore.Key]bool{}
	for _, key := range keys {
		if seen[key] {
			t.Fatalf("test bug: key %s listed twice", key)
		}
		seen[key] = true
	}

	value := func(i int) []byte { return []byte("value " + strconv.Itoa(i)) }
	for i, key := range keys {
		set(t, s, key, value(i))
	}
	for i, key := range keys {
		wantValue(t, s, key, value(i))
	}
	// Deleting one record leaves the others.
	set(t, s, k, nil)
	for i, key := range keys {
		if key == k {
			wantMissing(t, s, key)
		} else {
			wantValue(t, s, key, value(i))
		}
	}
	// List returns exactly the records of its kind, User and issuer.
	want := map[[3]string][]string{}
	for _, key := range keys[1:] {
		if key == k {
			continue
		}
		g := [3]string{string(key.Kind), key.User, key.Issuer}
		want[g] = append(want[g], key.ID)
	}
	for g, ids := range want {
		slices.Sort(ids)
		got, err := s.List(ctx, keystore.Kind(g[0]), g[1], g[2])
		if err != nil {
			t.Fatalf("List(%q, %q, %q): %v", g[0], g[1], g[2], err)
		}
		if gotIDs := idsOf(got); !slices.Equal(gotIDs, ids) {
			t.Errorf("List(%q, %q, %q) IDs = %q; want %q", g[0], g[1], g[2], gotIDs, ids)
		}
	}
}

func idsOf(keys []keystore.Key) []string {
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	return ids
}

func testList(t *testing.T, s keystore.Store, n namespace) {
	ctx := t.Context()
	kind := keystore.KindSession
	if keys, err := s.List(ctx, kind, n.user, n.issuer); err != nil || len(keys) != 0 {
		t.Fatalf("List with no records = %v, %v; want no keys", keys, err)
	}
	// Ascending byte order (Go's string order), which is not the order of
	// most human-language collations: a database that sorts by locale fails.
	ids := []string{"", "B", "a", "a-b", "ab", "a b", "a/b", "A", "é", "z", "Ω", "10", "9", "~", "_x", "ses_4Tn8"}
	want := slices.Clone(ids)
	slices.Sort(want)
	mathrand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		set(t, s, n.key(kind, id), []byte(id))
	}
	// Records of another kind, User or issuer are not listed.
	set(t, s, n.key(keystore.KindCursor, "other-kind"), []byte("x"))
	set(t, s, keystore.Key{Kind: kind, User: n.user + "-other", Issuer: n.issuer, ID: "other-user"}, []byte("x"))
	set(t, s, keystore.Key{Kind: kind, User: n.user, Issuer: n.issuer + "-other", ID: "other-issuer"}, []byte("x"))

	got, err := s.List(ctx, kind, n.user, n.issuer)
	if err != nil {
		t.Fatal(err)
	}
	if gotIDs := idsOf(got); !slices.Equal(gotIDs, want) {
		t.Fatalf("List IDs = %q; want %q", gotIDs, want)
	}
	for _, k := range got {
		if k.Kind != kind || k.User != n.user || k.Issuer != n.issuer {
			t.Fatalf("List returned key %s; want kind %s, User %s, issuer %s", k, kind, n.user, n.issuer)
		}
	}
	// A deleted record is no longer listed.
	set(t, s, n.key(kind, "ab"), nil)
	got, err = s.List(ctx, kind, n.user, n.issuer)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(want, func(id string) bool { return id == "ab" })
	if gotIDs := idsOf(got); !slices.Equal(gotIDs, want) {
		t.Fatalf("after a delete, List IDs = %q; want %q", gotIDs, want)
	}
}

func testBinaryValues(t *testing.T, s keystore.Store, n namespace) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	large := make([]byte, 64<<10)
	rand.Read(large)
	for i, v := range [][]byte{
		every,
		reversed(every),
		{0},
		[]byte("\x00\x00abc\x00"),
		[]byte("\xff\xfe\xc3\x28 invalid UTF-8"),
		[]byte("line\r\nbreaks\n"),
		large,
		[]byte("short after large"), // replacing a large value leaves nothing of it
	} {
		key := n.key(keystore.KindDPoPKey, "")
		if i < 6 {
			key.ID = strconv.Itoa(i)
		}
		set(t, s, key, v)
		wantValue(t, s, key, v)
		err := s.Update(t.Context(), key, func(current []byte) ([]byte, error) {
			if !bytes.Equal(current, v) {
				t.Errorf("value %d: fn got %s; want %s", i, show(current), show(v))
			}
			return current, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func reversed(b []byte) []byte {
	r := slices.Clone(b)
	slices.Reverse(r)
	return r
}

func testCopies(t *testing.T, s keystore.Store, n namespace) {
	ctx := t.Context()
	key := n.key(keystore.KindSession, "")
	set(t, s, key, []byte("abc"))

	got, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got[0] = 'X'
	wantValue(t, s, key, []byte("abc")) // changing what Get returned

	err = s.Update(ctx, key, func(current []byte) ([]byte, error) {
		current[0] = 'X'
		return nil, errFn
	})
	if !errors.Is(err, errFn) {
		t.Fatal(err)
	}
	wantValue(t, s, key, []byte("abc")) // changing fn's argument, then failing

	next := []byte("def")
	if err := s.Update(ctx, key, func([]byte) ([]byte, error) { return next, nil }); err != nil {
		t.Fatal(err)
	}
	next[0] = 'X'
	wantValue(t, s, key, []byte("def")) // changing fn's result after Update
}

func testInvalidKeys(t *testing.T, s keystore.Store, n namespace) {
	ctx := t.Context()
	for _, key := range []keystore.Key{
		{User: n.user, Issuer: n.issuer, ID: "x"},
		{Kind: keystore.KindSession, Issuer: n.issuer, ID: "x"},
		{Kind: keystore.KindSession, User: n.user, ID: "x"},
		{},
	} {
		noPanic(t, "Get("+key.String()+")", func() {
			v, err := s.Get(ctx, key)
			if err == nil || errors.Is(err, keystore.ErrNotFound) {
				t.Errorf("Get(%s) = %s, %v; want an error other than ErrNotFound", key, show(v), err)
			}
		})
		noPanic(t, "Update("+key.String()+")", func() {
			called := false
			err := s.Update(ctx, key, func([]byte) ([]byte, error) {
				called = true
				return []byte("v"), nil
			})
			if err == nil || called {
				t.Errorf("Update(%s) = %v, called fn: %v; want an error and no call", key, err, called)
			}
		})
		noPanic(t, "List("+key.String()+")", func() {
			keys, err := s.List(ctx, key.Kind, key.User, key.Issuer)
			if err == nil {
				t.Errorf("List(%q, %q, %q) = %v, nil; want an error", key.Kind, key.User, key.Issuer, keys)
			}
		})
	}
}

func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v; want an error", what, r)
		}
	}()
	f()
}

func testConcurrentIncrements(t *testing.T, s keystore.Store, n namespace) {
	const goroutines, rounds = 50, 20
	key := n.key(keystore.KindAccountToken, "counter")
	var calls atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				err := s.Update(t.Context(), key, func(current []byte) ([]byte, error) {
					calls.Add(1)
					runtime.Gosched() // as fn would while waiting for the network
					return increment(current)
				})
				if err != nil {
					t.Errorf("Update: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	wantValue(t, s, key, []byte(strconv.Itoa(goroutines*rounds)))
	if c := calls.Load(); c != goroutines*rounds {
		t.Fatalf("fn called %d times for %d Updates; want once each", c, goroutines*rounds)
	}
}

func testLockIsPerKey(t *testing.T, s keystore.Store, n namespace) {
	// fn may do slow network I/O (a token renewal) while it holds its key;
	// other keys must not wait for it.
	a := n.key(keystore.KindAccountToken, "a")
	b := n.key(keystore.KindAccountToken, "b")
	release, done := holdLock(t, s, a, []byte("a"))

	err := within(t, "Update of another key", func() error {
		return s.Update(t.Context(), b, func([]byte) ([]byte, error) { return []byte("b"), nil })
	})
	if err != nil {
		t.Fatalf("Update of %s while %s is locked: %v; want it to go ahead", b, a, err)
	}
	wantValue(t, s, b, []byte("b"))

	release()
	if err := <-done; err != nil {
		t.Fatalf("Update(%s): %v", a, err)
	}
	wantValue(t, s, a, []byte("a"))
}

func testWaiterReadsHolderResult(t *testing.T, s keystore.Store, n namespace) {
	// spec 4.8: one process renews a rotating Account Token while another
	// waits; the waiter must then get the rotated token, not the old one.
	key := n.key(keystore.KindAccountToken, "")
	set(t, s, key, []byte("token-1"))
	release, done := holdLock(t, s, key, []byte("token-2"))

	waiter := make(chan error, 1)
	var got []byte
	go func() {
		waiter <- s.Update(t.Context(), key, func(current []byte) ([]byte, error) {
			got = bytes.Clone(current)
			return []byte("token-3"), nil
		})
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter wait
	release()
	if err := <-done; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := within(t, "Update of a key just released", func() error { return <-waiter }); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if string(got) != "token-2" {
		t.Fatalf("waiter's fn got %s; want the holder's result %q", show(got), "token-2")
	}
	wantValue(t, s, key, []byte("token-3"))
}

func testCtxWhileWaiting(t *testing.T, s keystore.Store, n namespace) {
	key := n.key(keystore.KindSession, "")
	set(t, s, key, []byte("old"))
	release, done := holdLock(t, s, key, []byte("held"))

	called := false
	fn := func([]byte) ([]byte, error) {
		called = true
		return []byte("waiter"), nil
	}
	// A deadline passes while waiting.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := within(t, "Update whose deadline passed while waiting", func() error { return s.Update(ctx, key, fn) })
	if !errors.Is(err, context.DeadlineExceeded) || called {
		t.Fatalf("Update with a deadline, key locked = %v, called fn: %v; want context.DeadlineExceeded, no call", err, called)
	}
	// The caller cancels while waiting.
	ctx, cancel = context.WithCancel(t.Context())
	timer := time.AfterFunc(100*time.Millisecond, cancel)
	defer timer.Stop()
	err = within(t, "Update cancelled while waiting", func() error { return s.Update(ctx, key, fn) })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("Update cancelled, key locked = %v, called fn: %v; want context.Canceled, no call", err, called)
	}

	release()
	if err := <-done; err != nil {
		t.Fatalf("holder: %v", err)
	}
	wantValue(t, s, key, []byte("held"))
	// The abandoned waits left the key usable.
	err = within(t, "Update after abandoned waits", func() error {
		return s.Update(t.Context(), key, func([]byte) ([]byte, error) { return []byte("after"), nil })
	})
	if err != nil {
		t.Fatalf("Update after abandoned waits: %v", err)
	}
	wantValue(t, s, key, []byte("after"))
}

func testCtxDoneBefore(t *testing.T, s keystore.Store, n namespace) {
	key := n.key(keystore.KindSession, "")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	called := false
	err := s.Update(ctx, key, func([]byte) ([]byte, error) {
		called = true
		return []byte("v"), nil
	})
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("Update with a cancelled ctx = %v, called fn: %v; want context.Canceled, no call", err, called)
	}
	wantMissing(t, s, key)
}

func testCtxDoneDuringFn(t *testing.T, s keystore.Store, n namespace) {
	// Once fn has returned, its result is written even if ctx is done by
	// then: fn may have used a rotating Account Token, and the rotated token
	// in its result is the only one left that works (spec 4.8).
	key := n.key(keystore.KindAccountToken, "")
	set(t, s, key, []byte("token-1"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err := s.Update(ctx, key, func([]byte) ([]byte, error) {
		cancel() // the caller gives up while the token request is in flight
		return []byte("token-2"), nil
	})
	if err != nil {
		t.Fatalf("Update whose ctx was cancelled while fn ran = %v; want fn's result written and nil", err)
	}
	wantValue(t, s, key, []byte("token-2"))
}

func testPanicInFn(t *testing.T, s keystore.Store, n namespace) {
	key := n.key(keystore.KindSession, "")
	set(t, s, key, []byte("old"))
	func() {
		defer func() { recover() }()
		err := s.Update(t.Context(), key, func([]byte) ([]byte, error) {
			panic("storetest: fn panics")
		})
		if err == nil {
			t.Errorf("Update whose fn panicked returned nil; want the panic or an error")
		}
	}()
	wantValue(t, s, key, []byte("old"))
	err := within(t, "Update after a panic in fn", func() error {
		return s.Update(t.Context(), key, func([]byte) ([]byte, error) { return []byte("new"), nil })
	})
	if err != nil {
		t.Fatalf("Update after a panic in fn: %v; want the key unlocked", err)
	}
	wantValue(t, s, key, []byte("new"))
}
