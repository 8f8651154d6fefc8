// Package retry is the SDK's one policy for asking a Company again: how a
// Retry-After header is read, how long to wait before each retry, and the
// error that marks an attempt worth repeating.
//
//   - After reads Retry-After (RFC 9110 section 10.2.3) as delta-seconds or
//     an HTTP-date (PA-4.3-28), bounded to MaxAfter: any run of digits is a
//     wait, however long, so that a value too large for an integer is "too
//     long to wait" rather than absent (PA-4.3-27).
//   - Wait is the retry policy of a request the Company refused without
//     acting on it, or whose outcome is unknown (spec 4.3, PA-4.3-27..29,
//     at most Retries retries, each after Retry-After, or 1 s, 2 s
//     and 4 s without one; none when the wait is longer than the caller's
//     bound (AgentOptions.MaxRetryWait), nor when Retry-After reached
//     MaxAfter.
//   - Transient marks an attempt whose outcome is unknown or that the
//     Company asked to repeat (no answer, a cut body, a 5xx), with the
//     Retry-After it came with.
package retry

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxAfter bounds a Retry-After a Company sends. No wait of the SDK comes
// near it (AgentOptions.MaxRetryWait is 2 minutes by default, the
// operations Track wait 5 minutes); it bounds what callers are told to
// wait (poppy.Error.RetryAfter, operations.Operation.RetryAfter), and a
// value that reaches it is never waited out by Wait, whatever the caller's
// bound: the Company may have asked for much longer.
const MaxAfter = 24 * time.Hour

// Retries is how many times Wait lets a request be sent again.
const Retries = 3

// DefaultMaxWait is the longest single wait when the caller names none
// (AgentOptions.MaxRetryWait's default).
const DefaultMaxWait = 2 * time.Minute

// After reads a Retry-After value: delta-seconds, or an HTTP-date after
// now, rounded up to the second so that waiting "at least" the date never
// ends a fraction early. Either is bounded to MaxAfter. Anything else,
// and a date in the past, is absent (0).
func After(v string, now time.Time) time.Duration {
	d, _ := Parse(v, now)
	return d
}

// Parse reads a Retry-After value as After does, and reports whether it
// is one at all (RFC 9110 section 10.2.3): delta-seconds (any run of
// digits, "0" included) or an HTTP-date (one in the past is a wait of
// 0). A checker of a Company's answers (poppycheck) tells "absent or
// unreadable" from "no wait" this way.
func Parse(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if isDigits(v) {
		v = strings.TrimLeft(v, "0")
		if v == "" {
			return 0, true
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= uint64(MaxAfter/time.Second) {
			return MaxAfter, true // a range error is a run of digits too long for any integer
		}
		return time.Duration(n) * time.Second, true
	}
	if len(v) > 64 {
		return 0, false // no HTTP-date is this long
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now) // saturates, never overflows
	switch {
	case d <= 0:
		return 0, true
	case d >= MaxAfter:
		return MaxAfter, true
	}
	return min(d.Truncate(time.Second)+time.Second, MaxAfter), true
}

// isDigits reports whether s is one or more ASCII digits: the form of
// delta-seconds.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Wait returns how long to wait before retry number attempt+1 (attempt
// counts from 0) of a request the Company answered with retryAfter (zero
// when absent): retryAfter, or 1 s, 2 s, 4 s without it. It returns false
// when the request must not be sent again: Retries are used up, the wait
// is longer than maxWait, or retryAfter reached MaxAfter.
func Wait(retryAfter time.Duration, attempt int, maxWait time.Duration) (time.Duration, bool) {
	if attempt >= Retries || retryAfter >= MaxAfter {
		return 0, false
	}
	wait := retryAfter
	if wait <= 0 {
		wait = time.Second << attempt
	}
	if wait > maxWait {
		return 0, false
	}
	return wait, true
}

// Transient is an attempt whose outcome is unknown or that the Company
// asked to repeat: no response, a body cut short, a 5xx, a 429. After is
// the Company's Retry-After, zero when it sent none.
type Transient struct {
	// Prefix starts the error's text: the name of the package that
	// returns it, such as "conversation: ".
	Prefix string
	Err    error
	After  time.Duration
}

func (e *Transient) Error() string { return e.Prefix + e.Err.Error() }
func (e *Transient) Unwrap() error { return e.Err }

// IsTransient reports whether err is, or wraps, a *Transient.
func IsTransient(err error) bool {
	var t *Transient
	return errors.As(err, &t)
}

// AfterOf returns the Retry-After of the *Transient in err, zero when
// there is none.
func AfterOf(err error) time.Duration {
	var t *Transient
	if errors.As(err, &t) {
		return t.After
	}
	return 0
}
