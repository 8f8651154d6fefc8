package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
)

// BenchmarkUpdateTwoProcesses: 8 goroutines in each of 2 processes update
// separate records of one SQLite keystore, b.N updates each, while a ninth
// goroutine of the first process holds the lock of another User's record
// for the whole run. It reports updates/s over both processes. No Update
// may wait on the held lock: one that did would never finish, and its ctx
// (generous, so that only such a wait can reach it) fails the benchmark.
func BenchmarkUpdateTwoProcesses(b *testing.B) {
	const workers = 8
	path := filepath.Join(b.TempDir(), "keystore.db")
	s := openSQLite(b, path)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	held := make(chan struct{})
	release := make(chan struct{})
	blocker := keystore.Key{Kind: keystore.KindAccountToken, User: "blocker", Issuer: "https://auth.example.com"}
	blockErr := make(chan error, 1)
	go func() {
		blockErr <- s.Update(ctx, blocker, func([]byte) ([]byte, error) {
			close(held)
			<-release
			return []byte("held"), nil
		})
	}()
	<-held

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envBenchChild+"="+strconv.Itoa(b.N), envTestDB+"="+path)
	child.Stderr = os.Stderr
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		b.Fatalf("child: %q", lines.Text())
	}
	b.ResetTimer()
	start := time.Now()
	_, _ = io.WriteString(stdin, "go\n")
	err := runUpdates(ctx, s, "parent", workers, b.N)
	childErr := child.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(release)
	if err != nil {
		b.Fatal(err)
	}
	if childErr != nil {
		b.Fatalf("child: %v", childErr)
	}
	if err := <-blockErr; err != nil {
		b.Fatal(err)
	}
	n := float64(2 * workers * b.N)
	if elapsed <= 0 || n/elapsed.Seconds() < 1 {
		b.Fatalf("implausible: %v updates in %v", n, elapsed)
	}
	b.ReportMetric(n/elapsed.Seconds(), "updates/s")
}

// envBenchChild makes the test binary the second process of
// BenchmarkUpdateTwoProcesses, with the number of updates per goroutine.
const envBenchChild = "POPPY_KEYSTORE_BENCH_CHILD"

// benchChildMain runs the child's part when envBenchChild is set.
func benchChildMain() {
	v := os.Getenv(envBenchChild)
	if v == "" {
		return
	}
	err := func() error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		s, err := sqlitestore.Open(os.Getenv(envTestDB), nil)
		if err != nil {
			return err
		}
		defer s.Close()
		fmt.Println("ready")
		if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
			return fmt.Errorf("waiting for go: %q, %v", line, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		return runUpdates(ctx, s, "child", 8, n)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runUpdates has workers goroutines update n times each a record of their
// own User.
func runUpdates(ctx context.Context, s keystore.Store, prefix string, workers, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		key := keystore.Key{Kind: keystore.KindAccountToken, User: prefix + "-" + strconv.Itoa(w), Issuer: "https://auth.example.com"}
		wg.Go(func() {
			for range n {
				if err := s.Update(ctx, key, increment); err != nil {
					errs <- fmt.Errorf("%s: %w", key.User, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
