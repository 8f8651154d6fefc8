package poppy_test

import (
	"testing"

	"github.com/poppyproto/poppy"
)

// A SessionValue keeps one value per Session: the first stored wins, each
// SessionValue is a key of its own, and another Session has none.
func TestSessionValue(t *testing.T) {
	e := newEnv(t, nil, nil)
	alice, bob := e.session("alice"), e.session("bob")
	var a, b poppy.SessionValue[string]
	if _, ok := a.Load(alice); ok {
		t.Fatal("a value before any was stored")
	}
	if got, loaded := a.LoadOrStore(alice, "first"); loaded || got != "first" {
		t.Fatalf("LoadOrStore = %q, %v", got, loaded)
	}
	if got, loaded := a.LoadOrStore(alice, "second"); !loaded || got != "first" {
		t.Fatalf("a second LoadOrStore = %q, %v; want the first kept", got, loaded)
	}
	if _, ok := b.Load(alice); ok {
		t.Error("another SessionValue sees the value")
	}
	if _, ok := a.Load(bob); ok {
		t.Error("another Session has the value")
	}
	if got, ok := a.Load(alice); !ok || got != "first" {
		t.Errorf("Load = %q, %v", got, ok)
	}
}
