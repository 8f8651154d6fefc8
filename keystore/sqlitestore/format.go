package sqlitestore

import (
	"fmt"
	"log/slog"
	"strings"
)

// String names the store's file. Neither it nor any other verb of fmt or
// slog shows a record or the Sealer's keys.
func (s *Store) String() string {
	if s == nil {
		return "sqlitestore.Store(nil)"
	}
	sealed := ""
	if s.sealer != nil {
		sealed = ", sealed"
	}
	return "sqlitestore.Store(" + strings.TrimSuffix(s.lockDir, "-locks") + sealed + ")"
}

// GoString is String.
func (s *Store) GoString() string { return s.String() }

// Format writes String for every verb.
func (s *Store) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// LogValue logs String.
func (s *Store) LogValue() slog.Value { return slog.StringValue(s.String()) }
