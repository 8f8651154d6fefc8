package convbench

// The CPU per event of an agent reading a conversation by SSE and by long
// poll (CPUPerEvent). The agent runs in a child process of its own, so
// that its CPU time is the agent's alone: neither the fake Company's work
// (making events, checking proofs, writing pages) nor the garbage of the
// fake's history counts. The parent appends each round's events, then
// tells the child how many to read; the child reads them through Events
// and answers with the CPU time the reading took.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// The child's environment.
const (
	childMode = "POPPY_CONVBENCH_CHILD" // "sse" or "longpoll"
	childKey  = "POPPY_CONVBENCH_KEY"   // the agent's signing key, a private JWK
)

// childRound bounds one round of a child's reading: a child that reads
// nothing more fails the benchmark then, rather than hanging it.
const childRound = time.Minute

// ChildMain runs the child process of CPUPerEvent, and exits, when this
// process is one; else it returns at once. The TestMain of a test binary
// that runs CPUPerEvent must call it first.
func ChildMain() {
	mode := os.Getenv(childMode)
	if mode == "" {
		return
	}
	if err := child(mode); err != nil {
		fmt.Fprintln(os.Stderr, "convbench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// child starts a conversation, reads its start's events and writes its
// ID on stdout; then it reads it round after round: each line on stdin is
// a number of events to read through one Events loop, each answer on
// stdout the CPU time of that loop, in ns.
func child(mode string) error {
	ctx := context.Background()
	agent, err := testenv.ChildAgent([]byte(os.Getenv(childKey)), nil, keystore.NewMemory(), nil)
	if err != nil {
		return err
	}
	co, err := agent.Company(ctx, "example.test")
	if err != nil {
		return err
	}
	sess, err := co.Session(ctx, "alice", nil)
	if err != nil {
		return err
	}
	// The conversation is the child's: the fake knows the User by the
	// agent's keystore, which is the child's own.
	c, err := conversation.Start(ctx, sess, conversation.Text("Hello."), nil)
	if err != nil {
		return err
	}
	opts := &conversation.EventsOptions{LongPoll: mode == "longpoll"}
	rctx, cancel := context.WithTimeout(ctx, childRound)
	defer cancel()
	for ev, err := range c.Events(rctx, opts) {
		if err != nil {
			return fmt.Errorf("reading the start: %w", err)
		}
		if ev.Type == conversation.EventState && ev.Status == conversation.StatusIdle {
			break
		}
	}
	if _, err := fmt.Println(c.ID()); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(in.Text())
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, childRound)
		c0, got := cpuTime(), 0
		for _, err := range c.Events(rctx, opts) {
			if err != nil {
				cancel()
				return fmt.Errorf("after %d of %d events: %w", got, n, err)
			}
			if got++; got == n {
				break
			}
		}
		d := cpuTime() - c0
		cancel()
		if _, err := fmt.Println(d.Nanoseconds()); err != nil {
			return err
		}
	}
	return in.Err()
}

// childReader is a child process reading a conversation.
type childReader struct {
	name   string
	id     string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *bytes.Buffer
	cpu    time.Duration
	events int
}

// startChild starts a child reading by mode a conversation of its own.
func startChild(b *testing.B, e *env, mode string) *childReader {
	jwk, err := e.Key.MarshalPrivateJWK()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(append(os.Environ(), e.Srv.Env()...), childMode+"="+mode, childKey+"="+string(jwk))
	ch := &childReader{name: mode, cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = ch.stderr
	if ch.in, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	ch.out = bufio.NewScanner(out)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ch.in.Close() // the child returns at the end of its input
		if err := cmd.Wait(); err != nil && ch.id != "" {
			b.Errorf("%s child: %v\n%s", mode, err, ch.stderr)
		}
	})
	ch.id = ch.line(b)
	return ch
}

// line reads the child's next line; the child's end fails b.
func (ch *childReader) line(b *testing.B) string {
	if !ch.out.Scan() {
		ch.id = "" // it failed: Cleanup need not say so again
		ch.cmd.Wait()
		b.Fatalf("%s child: %v\n%s", ch.name, errors.Join(ch.out.Err(), io.ErrUnexpectedEOF), ch.stderr)
	}
	return strings.TrimSpace(ch.out.Text())
}

// round has the child read n events, and returns the CPU time it took.
func (ch *childReader) round(b *testing.B, n int) time.Duration {
	if _, err := fmt.Fprintln(ch.in, n); err != nil {
		b.Fatalf("%s child: %v\n%s", ch.name, err, ch.stderr)
	}
	line := ch.line(b)
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		b.Fatalf("%s child: %q", ch.name, line)
	}
	return time.Duration(ns)
}

// CPUPerEvent has two agents, each in a child process of its own (see
// ChildMain), read b.N events of a conversation each on one fake: one
// through Events by SSE, the other through Events by long poll, the fake
// answering pages of up to pageSize events. Rounds alternate, rotating
// which goes first, each round's events appended before it starts: the
// figure is the agent's CPU per event while it catches up, its own and
// nothing of the Company's. It reports sse-cpu-ns/event,
// lp-cpu-ns/event, lp-events/read and their ratio, the long poll's CPU
// per event over the stream's (BenchmarkCPUPerEvent, pages of 1,000;
// BenchmarkCPUPerEventPages100).
//
// A long poll costs a request per page (a proof signed, an HTTP/2
// exchange, the process woken): with pages of 100 that is most of its
// CPU per event, with pages of 1,000 a small part.
func CPUPerEvent(b *testing.B, pageSize int) {
	if cpuTime() == 0 {
		b.Skip("the process's CPU time is not available on this system")
	}
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, Streaming: true, PageSize: pageSize}, nil, false)
	sse := startChild(b, e, "sse")
	lp := startChild(b, e, "longpoll")
	for _, ch := range []*childReader{sse, lp} {
		produce(e, ch.id, warmupEvents)
		ch.round(b, warmupEvents) // not counted, as in interleave
	}
	base := reads(e, lp.id)
	b.ResetTimer()
	for r, left := 0, b.N; left > 0; r++ {
		n := min(left, roundEvents)
		left -= n
		for i := range 2 {
			ch := []*childReader{sse, lp}[(r+i)%2]
			b.StopTimer()
			produce(e, ch.id, n)
			b.StartTimer()
			ch.cpu += ch.round(b, n)
			ch.events += n
		}
	}
	b.StopTimer()
	s := float64(sse.cpu.Nanoseconds()) / float64(sse.events)
	l := float64(lp.cpu.Nanoseconds()) / float64(lp.events)
	perRead := float64(b.N) / float64(reads(e, lp.id)-base)
	b.ReportMetric(s, "sse-cpu-ns/event")
	b.ReportMetric(l, "lp-cpu-ns/event")
	b.ReportMetric(perRead, "lp-events/read")
	b.ReportMetric(l/s, "ratio") // the long poll's over the stream's
	// Reading costs something either way, and the long polls read full
	// pages (a round is whole pages but its last): anything else is a
	// broken benchmark.
	if b.N >= roundEvents && (s <= 0 || l <= 0 || perRead < float64(min(pageSize, roundEvents))/2) {
		b.Fatalf("implausible: %.0f ns/event by SSE, %.0f by long poll (%.1f events a read)", s, l, perRead)
	}
}
