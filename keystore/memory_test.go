package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/storetest"
)

func TestMemoryContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) keystore.Store {
		return keystore.NewMemory()
	})
}

// The in-process locks exist only while a key is being updated, so a
// long-running agent does not keep one for every key it ever updated.
func TestMemoryDropsLocks(t *testing.T) {
	ctx := t.Context()
	m := keystore.NewMemory()
	for i := range 100 {
		key := keystore.Key{Kind: keystore.KindCursor, User: "dana", Issuer: "https://auth.example.com", ID: strconv.Itoa(i)}
		if err := m.Update(ctx, key, func([]byte) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	// A wait abandoned because ctx was done drops its reference too.
	key := keystore.Key{Kind: keystore.KindCursor, User: "dana", Issuer: "https://auth.example.com"}
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- m.Update(ctx, key, func([]byte) ([]byte, error) {
			close(entered)
			<-release
			return nil, nil
		})
	}()
	<-entered
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := m.Update(wctx, key, func([]byte) ([]byte, error) { return nil, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Update = %v; want DeadlineExceeded", err)
	}
	if n := m.Locks(); n != 1 {
		t.Fatalf("%d locks while one key is held; want 1", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := m.Locks(); n != 0 {
		t.Fatalf("%d locks left after all Updates returned; want 0", n)
	}
}

func ExampleNewMemory() {
	ctx := context.Background()
	store := keystore.NewMemory()
	key := keystore.Key{Kind: keystore.KindCursor, User: "dana", Issuer: "https://auth.example.com", ID: "cnv_1"}

	// Update is a read-modify-write under a lock on the key: fn gets the
	// current value (nil at first) and returns the new one.
	err := store.Update(ctx, key, func(current []byte) ([]byte, error) {
		return []byte("evt_42"), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	cursor, err := store.Get(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", cursor)

	// Returning nil deletes the record.
	if err := store.Update(ctx, key, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		log.Fatal(err)
	}
	_, err = store.Get(ctx, key)
	fmt.Println(errors.Is(err, keystore.ErrNotFound))
	// Output:
	// evt_42
	// true
}
