package main

// Output: text for people, JSON for programs. Text that comes from a
// Company goes through esc (internal/termtext), the one place control
// characters are escaped; JSON is escaped by encoding/json. Colour only on
// a terminal, never with NO_COLOR or --json.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/poppyproto/poppy/internal/termtext"
	"golang.org/x/term"
)

// esc makes text from a Company safe to print on a terminal.
func esc(s string) string { return termtext.Escape(s) }

type output struct {
	stdout, stderr io.Writer
	json           bool
	tty            bool // stdout is a terminal
	errTTY         bool // stderr is a terminal
	color          bool
}

// isTerminal reports whether f (an *os.File, or stdin's input) is a
// terminal.
func isTerminal(f any) bool {
	fd, ok := f.(interface{ Fd() uintptr })
	return ok && fd.Fd() != ^uintptr(0) && term.IsTerminal(int(fd.Fd()))
}

func newOutput(stdout, stderr io.Writer, jsonOut bool, getenv func(string) string) *output {
	o := &output{stdout: stdout, stderr: stderr, json: jsonOut, tty: isTerminal(stdout), errTTY: isTerminal(stderr)}
	o.color = o.tty && !jsonOut && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
	return o
}

// printf writes text to stdout; it is a no-op with --json.
func (o *output) printf(format string, args ...any) {
	if o.json {
		return
	}
	_, _ = fmt.Fprintf(o.stdout, format, args...)
}

// prompt is where interactive text goes: stdout, or stderr with --json so
// that stdout holds only JSON.
func (o *output) prompt() io.Writer {
	if o.json {
		return o.stderr
	}
	return o.stdout
}

// emit writes one JSON value on a line of its own (--json only).
func (o *output) emit(v any) {
	if !o.json {
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		_ = enc.Encode(map[string]string{"error": "poppy: encoding output: " + err.Error()})
	}
	_, _ = o.stdout.Write(buf.Bytes())
}

func (o *output) warn(msg string) {
	if o.errTTY && !o.json && o.color {
		msg = "\x1b[1;33m" + msg + "\x1b[0m"
	}
	_, _ = fmt.Fprintln(o.stderr, msg)
}

// style wraps s in an SGR style on a colour terminal.
func (o *output) style(code, s string) string {
	if !o.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (o *output) bold(s string) string  { return o.style("1", s) }
func (o *output) green(s string) string { return o.style("32", s) }
func (o *output) dim(s string) string   { return o.style("2", s) }

// noun is word as it goes after the count n: "1 sign-in", "2 sign-ins",
// "0 sign-ins".
func noun(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// kv prints aligned "key: value" lines.
func (o *output) kv(pairs ...string) {
	w := 0
	for i := 0; i < len(pairs); i += 2 {
		w = max(w, len(pairs[i]))
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		o.printf("%-*s  %s\n", w+1, pairs[i]+":", pairs[i+1])
	}
}

// redactingHandler is the --verbose log handler: text records on stderr,
// with any attribute whose name suggests a secret replaced. The SDK never
// logs a secret; this is a second line of defence for what the command
// adds.
type redactingHandler struct{ slog.Handler }

var secretAttr = []string{"token", "proof", "assertion", "password", "secret", "code", "verifier", "credential", "dpop", "authorization", "cookie"}

func newRedactingHandler(w io.Writer) slog.Handler {
	return redactingHandler{slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
			k := strings.ToLower(at.Key)
			for _, s := range secretAttr {
				if strings.Contains(k, s) && at.Value.Kind() == slog.KindString {
					return slog.String(at.Key, "[REDACTED]")
				}
			}
			if at.Value.Kind() == slog.KindString {
				return slog.String(at.Key, esc(at.Value.String()))
			}
			return at
		},
	})}
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	r2 := slog.NewRecord(r.Time, r.Level, esc(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool { r2.AddAttrs(a); return true })
	return h.Handler.Handle(ctx, r2)
}

func (h redactingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return redactingHandler{h.Handler.WithAttrs(as)}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h.Handler.WithGroup(name)}
}
