package conversation

// Reading an SSE stream (spec 7.6, PA-7.6-03), by the event stream
// interpretation of the HTML standard (section 9.2.6), over a buffer of
// the stream's bytes, without copying a line but the data it carries.
//
// Lines end with CR LF, LF or CR; a line starting with a colon is a
// comment (heartbeats); "data" lines are joined with LF; "event" names the
// event's type; an empty line dispatches the event, unless it has no data.
// "id" and "retry" are not used: an event's ID is taken from its JSON
// (PA-7.6-07), and reconnects follow the SDK's own pacing. Unknown fields
// are ignored. A stream that ends in the middle of an event never
// dispatches it.
//
// The bound: an event (its lines, comments and unknown fields included,
// with their ends, but not the empty line that ends it) longer than
// Options.MaxEventBytes is errEventTooLarge, however its bytes arrive; a
// line without an end is never read past that bound.
//
// The reader reads more bytes only when the buffer holds no complete line
// left: every event received in full has been yielded (and handled) before
// the stream may wait for the Company (streamBody, burstEnd).

import (
	"bytes"
	"errors"
	"io"
)

// errEventTooLarge is an SSE event longer than the reader's bound.
var errEventTooLarge = errors.New("a streamed event exceeds its bound")

// sseEvent is one event of a stream: its type ("" for the default,
// "message") and its data, which is valid until the next call of next.
type sseEvent struct {
	typ  string
	data []byte
}

// sseReader reads the events of an SSE stream from r.
type sseReader struct {
	r   io.Reader
	max int // the longest event, in bytes

	buf        []byte // buf[start:end] is read and not parsed yet
	start, end int
	err        error // the error r returned, once buf is parsed

	data     []byte // the data lines of the event so far, each with its LF
	hasData  bool
	typ      []byte
	size     int  // bytes of the event so far
	searched int  // bytes at buf[start:] known to hold no line end
	skipLF   bool // the last line ended with CR: an LF right after it ends nothing
	started  bool // a BOM, if any, was taken off
}

// sseStartBuffer is the buffer a stream starts with; it grows while a
// line does not fit, up to the event bound.
const sseStartBuffer = 16 << 10

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: r, max: max, buf: make([]byte, min(sseStartBuffer, max+1))}
}

// next returns the next event. At the end of the stream it returns r's
// error (io.EOF for a stream closed by the Company); an event longer than
// the bound is errEventTooLarge.
func (p *sseReader) next() (sseEvent, error) {
	for {
		line, ok, err := p.line()
		if err != nil {
			return sseEvent{}, err
		}
		if !ok {
			continue
		}
		if len(line) == 0 {
			// An empty line: dispatch, unless there is no data.
			ev, has := sseEvent{typ: string(p.typ), data: p.data}, p.hasData
			p.size, p.hasData, p.typ = 0, false, p.typ[:0]
			if !has {
				p.data = p.data[:0]
				continue
			}
			ev.data = ev.data[:len(ev.data)-1] // the last LF
			p.data = p.data[:0]
			return ev, nil
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			p.data = append(append(p.data, value...), '\n')
			p.hasData = true
		case "event":
			p.typ = append(p.typ[:0], value...)
		}
		// A comment (an empty name), id, retry or another field: nothing.
	}
}

// line returns the next complete line, without its end, valid until the
// next call; ok is false when it took only the LF of a CR LF, or a BOM.
// It counts the line in the event's size, and reads more bytes when the
// buffer holds no complete line.
func (p *sseReader) line() (line []byte, ok bool, err error) {
	for {
		b := p.buf[p.start:p.end]
		if p.skipLF && len(b) > 0 {
			p.skipLF = false
			if b[0] == '\n' {
				p.start++
				if p.size > 0 {
					p.size++
				}
				return nil, false, nil
			}
		}
		if !p.started {
			switch {
			case bytes.HasPrefix(b, bom):
				p.started = true
				p.start += len(bom)
				return nil, false, nil
			case len(b) >= len(bom) || !bytes.HasPrefix(bom, b) || p.err != nil:
				p.started = true
			}
		}
		if p.started {
			// b[:p.searched] was searched before: no line ends there.
			if i := lineEnd(b[p.searched:]); i >= 0 {
				i += p.searched
				p.searched = 0
				if b[i] == '\r' {
					p.skipLF = true
				}
				p.start += i + 1
				if i > 0 {
					// An empty line ends an event, or is between two.
					p.size += i + 1
				}
				if p.size > p.max {
					return nil, false, errEventTooLarge
				}
				return b[:i], true, nil
			}
			p.searched = len(b)
			if p.size+len(b) > p.max {
				return nil, false, errEventTooLarge
			}
		}
		if p.err != nil {
			// What is left is an event the stream ended in the middle
			// of: never dispatched.
			return nil, false, p.err
		}
		p.fill()
	}
}

// bom is the UTF-8 byte order mark a stream may start with.
var bom = []byte("\xEF\xBB\xBF")

// lineEnd returns the index of the first CR or LF in b, or -1.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// fill reads more bytes into the buffer: at its end if there is room,
// else after moving what is left to its front, else into a buffer twice
// as large (a line the bound allows that does not fit yet). A reader that
// keeps returning nothing, and no error, is io.ErrNoProgress.
func (p *sseReader) fill() {
	if p.end == len(p.buf) {
		if p.start > 0 {
			p.end = copy(p.buf, p.buf[p.start:p.end])
			p.start = 0
		} else {
			// The line left is within the bound (line checked it), so
			// the buffer, at most max+1 bytes, is not full yet.
			nb := make([]byte, min(2*len(p.buf), p.max+1))
			p.end = copy(nb, p.buf[p.start:p.end])
			p.start, p.buf = 0, nb
		}
	}
	for range 100 {
		n, err := p.r.Read(p.buf[p.end:])
		p.end += n
		if err != nil {
			p.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	p.err = io.ErrNoProgress
}
