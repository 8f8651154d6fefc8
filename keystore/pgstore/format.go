package pgstore

import (
	"fmt"
	"log/slog"
)

// String describes the store. Neither it nor any other verb of fmt or
// slog shows a record, the pool's connection string or the Sealer's keys.
func (s *Store) String() string {
	if s == nil {
		return "pgstore.Store(nil)"
	}
	if s.sealer != nil {
		return "pgstore.Store(sealed)"
	}
	return "pgstore.Store()"
}

// GoString is String.
func (s *Store) GoString() string { return s.String() }

// Format writes String for every verb.
func (s *Store) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// LogValue logs String.
func (s *Store) LogValue() slog.Value { return slog.StringValue(s.String()) }
