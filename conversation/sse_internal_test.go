package conversation

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

type sseFrame struct{ typ, data string }

// readSSE reads every event of r with the bound max, and the error that
// ended the stream.
func readSSE(r io.Reader, max int) ([]sseFrame, error) {
	p := newSSEReader(r, max)
	var out []sseFrame
	for {
		ev, err := p.next()
		if err != nil {
			return out, err
		}
		out = append(out, sseFrame{ev.typ, string(ev.data)})
	}
}

// chunks hands out b in pieces of random sizes, 1 to 7 bytes.
type chunks struct {
	b   []byte
	rng *rand.Rand
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.b), 1+c.rng.IntN(7))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// TestPA_7_6_03_SSEFields: a stream is read by the HTML standard's event
// stream rules, however its bytes are cut by the network: an event's data
// lines are joined with LF (PA-7.6-03), comments and heartbeats, id, retry
// and unknown fields are ignored, lines end with LF, CR LF or CR, a BOM
// at the start is not part of the first line, an event without data is
// not dispatched, and one the stream ended in the middle of never is.
func TestPA_7_6_03_SSEFields(t *testing.T) {
	stream := "\xEF\xBB\xBFdata: {\"a\":1}\n\n" +
		": ping\nid: evt_1\nretry: 10\nunknown: x\ndata: {\"b\":\ndata:2}\n\n" + // PA-7.6-03
		"event: text-delta\r\ndata: piece\r\n\r\n" +
		"data: cr\r: ping\rdata: only\r\r" +
		"id: evt_2\nevent: ignored\n\n" + // no data: not dispatched
		"data\n\n" + // a data field without a value
		"data:  two spaces, one kept\n\n" +
		"\n\n\n" +
		"data: cut short\n"
	want := []sseFrame{
		{"", `{"a":1}`},
		{"", "{\"b\":\n2}"},
		{"text-delta", "piece"},
		{"", "cr\nonly"},
		{"", ""},
		{"", " two spaces, one kept"},
	}
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(stream) },
		"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(stream)) },
	}
	for seed := range uint64(20) {
		readers["chunks "+string(rune('a'+seed))] = func() io.Reader {
			return &chunks{b: []byte(stream), rng: rand.New(rand.NewPCG(seed, seed))}
		}
	}
	for name, r := range readers {
		got, err := readSSE(r(), 1<<10)
		if err != io.EOF {
			t.Errorf("%s: ended with %v, want io.EOF", name, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	// A cut (a read error) ends the stream with that error, after the
	// events received in full.
	cut := errors.New("cut")
	got, err := readSSE(io.MultiReader(strings.NewReader("data: 1\n\ndata: 2\n"), iotest.ErrReader(cut)), 1<<10)
	if err != cut || !slices.Equal(got, []sseFrame{{"", "1"}}) {
		t.Errorf("a cut stream: %q, %v", got, err)
	}
}

// TestSSEEventBounded: an event longer than the bound (its lines,
// comments and unknown fields included) is errEventTooLarge, whatever its
// bytes are; one as long as the bound is read; a line that never ends is
// never read past the bound.
func TestSSEEventBounded(t *testing.T) {
	const max = 1000
	ok := "data: " + strings.Repeat("x", max-len("data: \n")) + "\n" // max bytes
	for name, stream := range map[string]string{
		"data":     ok[:len(ok)-1] + "x\n\n",
		"lines":    strings.Repeat("data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", max/40) + "\n",
		"comments": strings.Repeat(": ping\n", max) + "data: 1\n\n",
		"unknown":  "data: 1\n" + strings.Repeat("x", max) + "\n\n",
	} {
		for _, r := range []io.Reader{strings.NewReader(stream), iotest.OneByteReader(strings.NewReader(stream))} {
			if got, err := readSSE(r, max); !errors.Is(err, errEventTooLarge) {
				t.Errorf("%s: %d events, %v; want errEventTooLarge", name, len(got), err)
			}
		}
	}
	got, err := readSSE(strings.NewReader(ok+"\n"+ok+"\n"), max)
	if err != io.EOF || len(got) != 2 || len(got[1].data) != max-len("data: \n") {
		t.Errorf("events as long as the bound: %d events, %v", len(got), err)
	}
	endless := &countingReader{}
	if _, err := readSSE(endless, max); !errors.Is(err, errEventTooLarge) || endless.n > max+1 {
		t.Errorf("a line without end: %v after %d bytes (bound %d)", err, endless.n, max)
	}
}

// countingReader is a stream of 'x' that never ends, counting the bytes
// read.
type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) {
	copy(p, bytes.Repeat([]byte("x"), len(p)))
	c.n += len(p)
	return len(p), nil
}

// FuzzSSEReader: whatever the bytes and however the network cuts them,
// the reader never panics, reads the same events and ends the same way,
// and no event's data is longer than the bound.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\ndata: {\"a\":1}\n\n: ping\nevent: text-delta\ndata: x\ndata: y\r\n\r\ndata:z\r\rdata\n\n"), uint16(64), uint64(1))
	f.Add([]byte("\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\n"), uint16(8), uint64(2))
	f.Add([]byte("data: "+strings.Repeat("x", 100)+"\n\n"), uint16(50), uint64(3))
	f.Fuzz(func(t *testing.T, in []byte, max uint16, seed uint64) {
		bound := int(max%4096) + 1
		whole, errWhole := readSSE(bytes.NewReader(in), bound)
		cut, errCut := readSSE(&chunks{b: in, rng: rand.New(rand.NewPCG(seed, seed))}, bound)
		if !slices.Equal(whole, cut) || errors.Is(errWhole, errEventTooLarge) != errors.Is(errCut, errEventTooLarge) {
			t.Fatalf("%q (bound %d): whole %q, %v; cut %q, %v", in, bound, whole, errWhole, cut, errCut)
		}
		for _, ev := range whole {
			if len(ev.data) > bound {
				t.Fatalf("%q: an event of %d bytes read with the bound %d", in, len(ev.data), bound)
			}
		}
	})
}
