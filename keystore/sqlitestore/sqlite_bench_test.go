package sqlitestore_test

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/poppyproto/poppy/keystore"
)

// The stores side by side: Memory is the floor, the cost of the contract
// itself (a lock and a copy); SQLite adds a query, and for Update a lock file
// and a transaction flushed to disk (synchronous=FULL), which is most of its
// cost and depends on the disk more than on the code.
//
//	go test -run x -bench . -benchtime=200x ./keystore/sqlitestore/

var benchStores = []struct {
	name string
	open func(b *testing.B) keystore.Store
}{
	{"Memory", func(b *testing.B) keystore.Store { return keystore.NewMemory() }},
	{"SQLite", func(b *testing.B) keystore.Store {
		return openSQLite(b, filepath.Join(b.TempDir(), "keystore.db"))
	}},
}

// benchValue is about the size of a Session record: an ID and a token.
var benchValue = bytes.Repeat([]byte("x"), 512)

func BenchmarkGet(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			ctx := b.Context()
			if err := s.Update(ctx, dana, func([]byte) ([]byte, error) { return benchValue, nil }); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := s.Get(ctx, dana); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUpdate(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			ctx := b.Context()
			var i uint64
			for b.Loop() {
				// A new value each time, as a renewal writes: rewriting the same
				// bytes leaves SQLite nothing to commit and skips the fsync.
				i++
				err := s.Update(ctx, dana, func(current []byte) ([]byte, error) {
					v := bytes.Clone(benchValue)
					binary.BigEndian.PutUint64(v, i)
					return v, nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Updates of one key from many goroutines take turns.
func BenchmarkUpdateParallelOneKey(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			ctx := b.Context()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Update(ctx, dana, increment); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// Updates of different keys go ahead side by side, up to the disk.
func BenchmarkUpdateParallelManyKeys(b *testing.B) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			ctx := b.Context()
			var n atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := dana
				key.ID = strconv.FormatInt(n.Add(1), 10)
				for pb.Next() {
					if err := s.Update(ctx, key, increment); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
