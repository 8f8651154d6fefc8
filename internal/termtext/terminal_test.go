package termtext

import (
	"os"
	"testing"
)

// A pipe is no terminal: a prompt reading it reads a line as it is, and
// its echo can't be switched off. (A real terminal's side is shown through
// a pseudo-terminal by cmd/poppy's TestPTYMediatedPromptsWithoutEcho.)
func TestPipeIsNoTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(r.Fd()) {
		t.Error("IsTerminal(pipe) = true")
	}
	if restore, ok := EchoOff(r.Fd()); ok || restore != nil {
		t.Error("EchoOff(pipe) worked")
	}
}
