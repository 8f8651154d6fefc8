package storetest

// How the checks between processes work.
//
// MultiProcess and Crash run the test binary again (os.Args[0]) as children,
// with -test.run=^$ so that no test runs even if TestMain does not call
// ChildMain, and with POPPY_STORETEST_CHILD naming the child's part. The
// child's TestMain calls ChildMain, which opens the store with the function it
// was given, then talks to the parent one line at a time:
//
//	child:  ready          the store is open
//	parent: go             all children are ready: start together
//	child:  ...            the part's results (see the child functions)
//
// Starting together makes the children contend for the record from their
// first Update, which is what the checks are about.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
)

// Environment variables from the parent to a child.
const (
	envPart   = "POPPY_STORETEST_CHILD"  // what the child does: partIncrement, partHang or partWrite
	envKey    = "POPPY_STORETEST_KEY"    // the key of the record, as JSON
	envRounds = "POPPY_STORETEST_ROUNDS" // how many increments partIncrement does
)

const (
	partIncrement = "increment" // increment a counter Rounds times, then report how often fn ran
	partHang      = "hang"      // call Update and hang in fn until killed
	partWrite     = "write"     // replace the record with large values until killed
)

// childLimit bounds each wait for a child's next line.
const childLimit = 2 * time.Minute

// MultiProcessOptions configures [MultiProcess]. A nil *MultiProcessOptions
// means the defaults.
type MultiProcessOptions struct {
	Processes int // child processes; zero means 2
	Rounds    int // increments by each; zero means 200
}

// MultiProcess checks that Update is atomic across OS processes: several
// child processes start together and each increments one counter record of
// the shared store Rounds times. At the end the counter must equal
// Processes × Rounds, with fn called exactly once per increment: no update
// lost, none repeated.
//
// store is the test's own handle on the shared store, used to check the
// result. env holds the environment variables the children's open function
// (given to [ChildMain]) needs to open the same store.
func MultiProcess(t *testing.T, store keystore.Store, env map[string]string, opts *MultiProcessOptions) {
	t.Helper()
	var o MultiProcessOptions
	if opts != nil {
		o = *opts
	}
	if o.Processes <= 0 {
		o.Processes = 2
	}
	if o.Rounds <= 0 {
		o.Rounds = 200
	}
	key := newNamespace(t).key(keystore.KindAccountToken, "multiprocess")
	children := make([]*child, o.Processes)
	for i := range children {
		children[i] = startChild(t, partIncrement, key, env, map[string]string{envRounds: strconv.Itoa(o.Rounds)})
	}
	for _, c := range children {
		c.expect(t, "ready")
	}
	for _, c := range children {
		c.send(t, "go")
	}
	for i, c := range children {
		line := c.next(t)
		calls, ok := strings.CutPrefix(line, "done ")
		if !ok {
			t.Fatalf("child %d: got %q; want %q", i, line, "done N")
		}
		if calls != strconv.Itoa(o.Rounds) {
			t.Errorf("child %d: fn called %s times for %d Updates; want once each", i, calls, o.Rounds)
		}
		c.wait(t)
	}
	wantValue(t, store, key, []byte(strconv.Itoa(o.Processes*o.Rounds)))
}

// Crash checks that a process killed (SIGKILL on Unix) in the middle of an
// Update leaves the previous value readable and the key unlocked:
//
//   - A child calls Update and is killed while fn runs: the record keeps its
//     value, and an Update from this process goes ahead at once.
//   - A child replaces the record with large values as fast as it can and is
//     killed at a random moment, five times: each time the record holds one
//     whole value the child wrote, and the store still works.
//
// store and env are as for [MultiProcess].
func Crash(t *testing.T, store keystore.Store, env map[string]string) {
	t.Helper()
	n := newNamespace(t)
	ctx := t.Context()

	// Killed while fn runs.
	key := n.key(keystore.KindAccountToken, "crash-in-fn")
	set(t, store, key, []byte("before"))
	c := startChild(t, partHang, key, env, nil)
	c.expect(t, "ready")
	c.send(t, "go")
	c.expect(t, `in fn "before"`)
	c.kill(t)
	wantValue(t, store, key, []byte("before"))
	err := within(t, "Update after the holder of the lock was killed", func() error {
		return store.Update(ctx, key, func([]byte) ([]byte, error) { return []byte("after"), nil })
	})
	if err != nil {
		t.Fatalf("Update after the holder of the lock was killed: %v; want the key unlocked", err)
	}
	wantValue(t, store, key, []byte("after"))

	// Killed at a random moment while writing.
	key = n.key(keystore.KindSession, "crash-in-write")
	set(t, store, key, writeValue(0))
	for range 5 {
		c := startChild(t, partWrite, key, env, nil)
		c.expect(t, "ready")
		c.send(t, "go")
		c.expect(t, "writing")
		time.Sleep(time.Duration(mathrand.N(100)) * time.Millisecond)
		c.kill(t)
		v, err := store.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get after a writer was killed: %v", err)
		}
		if !isWriteValue(v) {
			t.Fatalf("after a writer was killed, the record holds %s; want one whole value it wrote", show(v))
		}
	}
	err = within(t, "Update after writers were killed", func() error {
		return store.Update(ctx, key, func([]byte) ([]byte, error) { return []byte("after"), nil })
	})
	if err != nil {
		t.Fatalf("Update after writers were killed: %v", err)
	}
	wantValue(t, store, key, []byte("after"))
}

// writeValue returns the i-th value partWrite writes: 64 KiB that hold i
// throughout, so that a value made of two writes shows.
func writeValue(i uint64) []byte {
	v := make([]byte, 64<<10)
	for j := 0; j < len(v); j += 8 {
		binary.BigEndian.PutUint64(v[j:], i)
	}
	return v
}

func isWriteValue(v []byte) bool {
	return len(v) == 64<<10 && bytes.Equal(v, writeValue(binary.BigEndian.Uint64(v)))
}

// ChildMain does the part of a child process of [MultiProcess] or [Crash]
// and exits, or returns at once in any other process. Call it first thing in
// TestMain, with a function that opens the shared store from the environment
// variables the test passes; if the store has a Close method, the child calls
// it. See the package documentation.
func ChildMain(open func() (keystore.Store, error)) {
	part := os.Getenv(envPart)
	if part == "" {
		return
	}
	if err := runChild(part, open); err != nil {
		fmt.Fprintf(os.Stderr, "storetest child (%s): %v\n", part, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(part string, open func() (keystore.Store, error)) error {
	var key keystore.Key
	if err := json.Unmarshal([]byte(os.Getenv(envKey)), &key); err != nil {
		return fmt.Errorf("reading %s: %v", envKey, err)
	}
	store, err := open()
	if err != nil {
		return fmt.Errorf("opening the store: %v", err)
	}
	if c, ok := store.(io.Closer); ok {
		defer c.Close()
	}
	// A child the parent forgot is gone after a while.
	ctx, cancel := context.WithTimeout(context.Background(), childLimit)
	defer cancel()

	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: got %q, %v", line, err)
	}
	switch part {
	case partIncrement:
		rounds, err := strconv.Atoi(os.Getenv(envRounds))
		if err != nil {
			return fmt.Errorf("reading %s: %v", envRounds, err)
		}
		calls := 0
		for range rounds {
			err := store.Update(ctx, key, func(current []byte) ([]byte, error) {
				calls++
				return increment(current)
			})
			if err != nil {
				return err
			}
		}
		fmt.Printf("done %d\n", calls)
		return nil

	case partHang:
		return store.Update(ctx, key, func(current []byte) ([]byte, error) {
			fmt.Printf("in fn %q\n", current)
			<-ctx.Done() // until killed
			return []byte("written by a child that should have been killed"), nil
		})

	case partWrite:
		fmt.Println("writing")
		for i := uint64(1); ctx.Err() == nil; i++ {
			err := store.Update(ctx, key, func([]byte) ([]byte, error) { return writeValue(i), nil })
			if err != nil {
				return err
			}
		}
		return ctx.Err()
	}
	return fmt.Errorf("unknown part %q", part)
}

// child is a child process seen from the parent.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string   // lines the child prints; closed at end of output
	stderr *bytes.Buffer // read only after cmd.Wait
	done   bool          // waited for
}

func startChild(t *testing.T, part string, key keystore.Key, env, more map[string]string) *child {
	t.Helper()
	k, err := json.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = os.Environ()
	for _, m := range []map[string]string{env, more, {envPart: part, envKey: string(k)}} {
		for name, v := range m {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	c := &child{cmd: cmd, lines: make(chan string, 16), stderr: new(bytes.Buffer)}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a child process: %v", err)
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

// next returns the child's next line of output.
func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if ok {
			return line
		}
		err := c.finish()
		t.Fatalf("child process ended (%v) before its part was done; its stderr:\n%s\n"+
			"(The test binary's TestMain must call storetest.ChildMain before anything else.)", err, c.stderr)
	case <-time.After(childLimit):
		t.Fatalf("child process printed nothing for %v", childLimit)
	}
	return ""
}

// expect checks that the child's next line is want.
func (c *child) expect(t *testing.T, want string) {
	t.Helper()
	if got := c.next(t); got != want {
		t.Fatalf("child process printed %q; want %q", got, want)
	}
}

func (c *child) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatalf("writing to a child process: %v", err)
	}
}

// wait waits for the child to exit and checks that it succeeded.
func (c *child) wait(t *testing.T) {
	t.Helper()
	if err := c.finish(); err != nil {
		t.Fatalf("child process: %v; its stderr:\n%s", err, c.stderr)
	}
}

// kill kills the child (SIGKILL on Unix) and waits for it to exit.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing a child process: %v", err)
	}
	err := c.finish()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Success() {
		t.Fatalf("killed child process ended with %v; want killed; its stderr:\n%s", err, c.stderr)
	}
}

// finish reads the rest of the child's output, as exec.Cmd.Wait requires,
// then waits for it to exit.
func (c *child) finish() error {
	c.stdin.Close()
	for range c.lines {
	}
	c.done = true
	return c.cmd.Wait()
}
