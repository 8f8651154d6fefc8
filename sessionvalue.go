package poppy

// A SessionValue keeps one value of type T per Session, for a package that
// extends Sessions: package operations keeps each Session's Client in one,
// so that packages api and conversation find the Client the caller made
// instead of needing it passed to each (OPS 4: one operation per
// operation_id across channels). A value lives as long as its Session, so
// never longer than the Agent; a SessionValue itself holds nothing.
// Declare one as a package-level variable and use it as a key; its zero
// value is ready. It is safe for concurrent use.
type SessionValue[T any] struct {
	_ byte // not zero-sized, so that each SessionValue is a key of its own
}

// Load returns s's value and true, or the zero T and false.
func (k *SessionValue[T]) Load(s *Session) (T, bool) {
	v, ok := s.values.Load(k)
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

// LoadOrStore returns s's value and true if s has one; otherwise it makes
// v s's value and returns v and false.
func (k *SessionValue[T]) LoadOrStore(s *Session, v T) (T, bool) {
	got, loaded := s.values.LoadOrStore(k, v)
	return got.(T), loaded
}
