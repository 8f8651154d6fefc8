package bounded

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestReadAll(t *testing.T) {
	if b, err := ReadAll(strings.NewReader("12345"), 5); err != nil || string(b) != "12345" {
		t.Fatalf("at the bound: %q, %v", b, err)
	}
	if b, err := ReadAll(strings.NewReader("123456"), 5); !errors.Is(err, ErrTooLarge) || b != nil {
		t.Fatalf("past the bound: %q, %v", b, err)
	}
	cause := errors.New("cut")
	if _, err := ReadAll(io.MultiReader(strings.NewReader("12"), errReader{cause}), 5); !errors.Is(err, cause) {
		t.Fatalf("a failing read: %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestBody(t *testing.T) {
	tooLarge := fmt.Errorf("%w: a test body", ErrTooLarge)
	b, err := io.ReadAll(Body(io.NopCloser(strings.NewReader("12345")), 5, tooLarge))
	if err != nil || string(b) != "12345" {
		t.Fatalf("at the bound: %q, %v", b, err)
	}
	_, err = io.ReadAll(Body(io.NopCloser(strings.NewReader("123456")), 5, tooLarge))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the bound: %v", err)
	}
}
