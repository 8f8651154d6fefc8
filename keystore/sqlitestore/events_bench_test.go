package sqlitestore_test

// Package conversation's event throughput (internal/testenv/convbench) in
// one run: in memory, with the cursor in SQLite on disk, and the floor, a
// bare net/http read of the same SSE stream, each timed alternately with
// its floor in one benchmark (the *Interleaved ones) and as benchmarks of
// their own; and the CPU per event of an agent reading by long poll and
// by SSE (CPUPerEvent, whose agents run as children of this test binary:
// TestMain calls convbench.ChildMain). docs/performance.md compares each
// with its floor measured here, in the same go test run
// (internal/cmd/benchreport).
//
//	go test -run '^$' -bench 'Events|Floor|CPUPerEvent' -benchmem ./keystore/sqlitestore

import (
	"path/filepath"
	"testing"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv/convbench"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// BenchmarkEventsSSE reads the stream with an in-memory keystore.
func BenchmarkEventsSSE(b *testing.B) { convbench.Throughput(b, false) }

// BenchmarkFloorBareSSE reads the same stream with net/http and
// bufio.Scanner alone.
func BenchmarkFloorBareSSE(b *testing.B) { convbench.FloorBareSSE(b) }

// BenchmarkEventsSSEInterleaved reads the stream through Events (in-memory
// keystore) and by the bare read, alternately in one benchmark.
func BenchmarkEventsSSEInterleaved(b *testing.B) { convbench.SSEInterleaved(b, nil, nil) }

// BenchmarkEventsSSECatchUpInterleaved does the same with each round's
// events waiting before it starts: the readers' work alone bounds both.
func BenchmarkEventsSSECatchUpInterleaved(b *testing.B) { convbench.SSECatchUpInterleaved(b) }

// BenchmarkEventsSSESQLiteInterleaved does the same as
// BenchmarkEventsSSEInterleaved with the cursor saved
// in an SQLite keystore on disk by the default checkpoint policy.
func BenchmarkEventsSSESQLiteInterleaved(b *testing.B) {
	convbench.SSEInterleaved(b, benchStore(b), nil)
}

// BenchmarkCPUPerEvent compares the CPU per event of an agent reading by
// long poll, pages of up to 1,000 events, with one reading by SSE, each
// in a child process of its own, alternately in one benchmark
// (lp-cpu-ns/event, sse-cpu-ns/event, and their ratio).
func BenchmarkCPUPerEvent(b *testing.B) { convbench.CPUPerEvent(b, 1000) }

// BenchmarkCPUPerEventPages100 does the same with pages of up to 100
// events (the fake's default): ten times the requests.
func BenchmarkCPUPerEventPages100(b *testing.B) { convbench.CPUPerEvent(b, 100) }

// BenchmarkEventsSSESQLite reads the stream with the cursor saved in an
// SQLite keystore on disk, by the default checkpoint policy (after each
// burst, at most 256 events or 1 s apart).
func BenchmarkEventsSSESQLite(b *testing.B) { convbench.Durable(b, benchStore(b), nil) }

// BenchmarkEventsSSESQLiteEachEvent saves the cursor after every event
// (Checkpoint.Events 1): one SQLite commit per event.
func BenchmarkEventsSSESQLiteEachEvent(b *testing.B) {
	convbench.Durable(b, benchStore(b), &conversation.EventsOptions{Checkpoint: conversation.Checkpoint{Events: 1}})
}

// BenchmarkUnknownEventsSQLite reads pages of 100 events of an unknown
// type (skipped, spec 7.5) by long poll, with the cursor in SQLite: the
// cost of skipping, per event.
func BenchmarkUnknownEventsSQLite(b *testing.B) { convbench.UnknownEvents(b, benchStore(b)) }

// benchStore is a keystore in a file of the benchmark's own, closed when
// it ends.
func benchStore(b *testing.B) *sqlitestore.Store {
	store, err := sqlitestore.Open(filepath.Join(b.TempDir(), "keystore.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return store
}
