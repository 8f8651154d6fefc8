package pgstore_test

// Benchmarks against the server named by POPPY_TEST_POSTGRES_URL, with the
// same names and value size as the SQLite benchmarks of package keystore so
// that the figures compare side by side:
//
//	source .ci/postgres.sh
//	go test -run '^$' -bench . -benchtime=2000x ./keystore/pgstore/
//	go test -run '^$' -bench . -benchtime=2000x ./keystore/
//
// BenchmarkTwoProcesses measures throughput the way an agent product runs:
// two OS processes (as two replicas) with 25 goroutines each, 50 in all,
// updating one store. It reports updates/s; nothing asserts a figure.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/pgstore"
)

// benchValue is about the size of a Session record: an ID and a token.
var benchValue = bytes.Repeat([]byte("x"), 512)

func benchStores(b *testing.B) []struct {
	name  string
	store *pgstore.Store
} {
	pool := testPool(b)
	return []struct {
		name  string
		store *pgstore.Store
	}{
		{"PostgreSQL", newStore(b, pool, &pgstore.Options{Table: testTable(b, pool)})},
		{"PostgreSQLSealed", newStore(b, pool, &pgstore.Options{Table: testTable(b, pool), Sealer: testSealer(b, 1)})},
	}
}

func BenchmarkGet(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			ctx := b.Context()
			put(b, st.store, testKey, benchValue)
			for b.Loop() {
				if _, err := st.store.Get(ctx, testKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUpdate(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			ctx := b.Context()
			for b.Loop() {
				err := st.store.Update(ctx, testKey, func([]byte) ([]byte, error) { return benchValue, nil })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Updates of one key from many goroutines take turns.
func BenchmarkUpdateParallelOneKey(b *testing.B) {
	for _, st := range benchStores(b)[:1] {
		b.Run(st.name, func(b *testing.B) {
			ctx := b.Context()
			key := testKey
			key.ID = "one-key-" + randomHex(4)
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := st.store.Update(ctx, key, increment); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// Updates of different keys go ahead side by side.
func BenchmarkUpdateParallelManyKeys(b *testing.B) {
	for _, st := range benchStores(b)[:1] {
		b.Run(st.name, func(b *testing.B) {
			ctx := b.Context()
			var n atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := testKey
				key.ID = strconv.FormatInt(n.Add(1), 10)
				for pb.Next() {
					if err := st.store.Update(ctx, key, increment); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// Environment of a benchmark child process.
const (
	envBenchChild      = "POPPY_PGSTORE_BENCH_CHILD"      // "manykeys" or "onekey"
	envBenchUpdates    = "POPPY_PGSTORE_BENCH_UPDATES"    // updates the child makes in all
	envBenchGoroutines = "POPPY_PGSTORE_BENCH_GOROUTINES" // goroutines sharing them
	envBenchPrefix     = "POPPY_PGSTORE_BENCH_PREFIX"     // distinguishes the children's keys
)

// BenchmarkTwoProcesses runs b.N updates split across two child processes
// of 25 goroutines each. ManyKeys gives each goroutine a record of its own,
// as 50 Sessions renewing at once; OneKey makes all 50 update one record, the
// worst case of replicas contending for one rotating Account Token.
func BenchmarkTwoProcesses(b *testing.B) {
	for _, mode := range []string{"manykeys", "onekey"} {
		b.Run(mode, func(b *testing.B) { benchTwoProcesses(b, mode) })
	}
}

func benchTwoProcesses(b *testing.B, mode string) {
	const processes, goroutines = 2, 25
	pool := testPool(b)
	table := testTable(b, pool)
	s := newStore(b, pool, &pgstore.Options{Table: table})
	put(b, s, testKey, nil) // migrate before the children race to
	b.StopTimer()
	type proc struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		lines *bufio.Scanner
	}
	var procs []proc
	for i := range processes {
		n := b.N / processes
		if i == 0 {
			n += b.N % processes
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(),
			envBenchChild+"="+mode,
			envBenchUpdates+"="+strconv.Itoa(n),
			envBenchGoroutines+"="+strconv.Itoa(goroutines),
			envBenchPrefix+"="+strconv.Itoa(i),
			envTable+"="+table,
		)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		procs = append(procs, proc{cmd, in, bufio.NewScanner(out)})
	}
	for i, p := range procs {
		if !p.lines.Scan() || p.lines.Text() != "ready" {
			b.Fatalf("child %d did not get ready: %q", i, p.lines.Text())
		}
	}
	start := time.Now()
	b.StartTimer()
	for _, p := range procs {
		io.WriteString(p.in, "go\n")
	}
	for i, p := range procs {
		if !p.lines.Scan() || p.lines.Text() != "done" {
			b.Fatalf("child %d failed: %q", i, p.lines.Text())
		}
	}
	b.StopTimer()
	elapsed := time.Since(start)
	for i, p := range procs {
		p.in.Close()
		if err := p.cmd.Wait(); err != nil {
			b.Fatalf("child %d: %v", i, err)
		}
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "updates/s")
	if mode == "onekey" {
		got, err := s.Get(b.Context(), benchKey("onekey", "", 0))
		if err != nil || string(got) != strconv.Itoa(b.N) {
			b.Fatalf("after %d updates the counter is %q, %v", b.N, got, err)
		}
	}
}

func benchKey(mode, prefix string, goroutine int) keystore.Key {
	k := testKey
	k.Kind = keystore.KindSession
	k.ID = "bench"
	if mode == "manykeys" {
		k.ID = fmt.Sprintf("bench-%s-%d", prefix, goroutine)
	}
	return k
}

// benchChildMain does a benchmark child's part and exits, or returns at once
// in any other process.
func benchChildMain() {
	mode := os.Getenv(envBenchChild)
	if mode == "" {
		return
	}
	if err := benchChild(mode); err != nil {
		fmt.Fprintf(os.Stderr, "benchmark child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func benchChild(mode string) error {
	updates, err := strconv.Atoi(os.Getenv(envBenchUpdates))
	if err != nil {
		return err
	}
	goroutines, err := strconv.Atoi(os.Getenv(envBenchGoroutines))
	if err != nil {
		return err
	}
	prefix := os.Getenv(envBenchPrefix)
	url := os.Getenv(urlEnv)
	// A connection per goroutine, so that the pool is not what limits.
	if strings.Contains(url, "?") {
		url += "&pool_max_conns=" + strconv.Itoa(goroutines)
	} else {
		url += "?pool_max_conns=" + strconv.Itoa(goroutines)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := pgstore.Open(ctx, url, &pgstore.Options{Table: os.Getenv(envTable)})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: %q, %v", line, err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		key := benchKey(mode, prefix, g)
		wg.Go(func() {
			for next.Add(1) <= int64(updates) {
				if err := s.Update(ctx, key, increment); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Println("done")
	return nil
}
