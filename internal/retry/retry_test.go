package retry

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// PA-4.3-28
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 10, 2, 17, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"5", 5 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"", 0},
		{"soon", 0},
		{"+5", 0}, // delta-seconds is 1*DIGIT
		{"1.5", 0},
		{" 7 ", 7 * time.Second},
		{"0007", 7 * time.Second},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 11 * time.Second},
		{now.Add(-10 * time.Second).Format(http.TimeFormat), 0},
		// PA-4.3-27: any run of digits is a wait, bounded, never absent.
		{"86399", 86399 * time.Second},
		{"86400", MaxAfter},
		{"99999999999999999999", MaxAfter},
		{now.Add(90 * 24 * time.Hour).Format(http.TimeFormat), MaxAfter},
	} {
		if got := After(c.in, now); got != c.want {
			t.Errorf("After(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"5", "0", "99999999999999999999", "-1", "1.5", "Wed, 21 Oct 2026 07:28:00 GMT", " 7 ", "", "1e3"} {
		f.Add(s)
	}
	now := time.Date(2026, 10, 21, 7, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d := After(v, now)
		if d < 0 || d > MaxAfter {
			t.Fatalf("Retry-After %q gave %v, outside [0, %v]", v, d, MaxAfter)
		}
		if isDigits(strings.TrimSpace(v)) && strings.Trim(strings.TrimSpace(v), "0") != "" && d == 0 {
			t.Fatalf("Retry-After %q (a positive number of seconds) read as absent", v)
		}
	})
}

// PA-4.3-27, PA-4.3-29, A-40: at least Retry-After; without one 1 s, 2 s,
// 4 s; three retries at most; none longer than the caller's bound, and
// none for a Retry-After that reached MaxAfter, whatever the bound.
func TestWait(t *testing.T) {
	for _, c := range []struct {
		after, max time.Duration
		attempt    int
		want       time.Duration
		ok         bool
	}{
		{0, time.Minute, 0, time.Second, true},
		{0, time.Minute, 1, 2 * time.Second, true},
		{0, time.Minute, 2, 4 * time.Second, true},
		{0, time.Minute, 3, 0, false},
		{7 * time.Second, time.Minute, 0, 7 * time.Second, true},
		{7 * time.Second, time.Minute, 3, 0, false},
		{2 * time.Minute, time.Minute, 0, 0, false},
		{time.Minute, time.Minute, 0, time.Minute, true},
		{0, 500 * time.Millisecond, 0, 0, false},
		{MaxAfter - time.Second, 48 * time.Hour, 0, MaxAfter - time.Second, true},
		{MaxAfter, 48 * time.Hour, 0, 0, false},
	} {
		got, ok := Wait(c.after, c.attempt, c.max)
		if got != c.want || ok != c.ok {
			t.Errorf("Wait(%v, %d, %v) = %v, %v; want %v, %v", c.after, c.attempt, c.max, got, ok, c.want, c.ok)
		}
	}
}

func TestTransient(t *testing.T) {
	cause := errors.New("connection reset")
	err := fmt.Errorf("wrapped: %w", &Transient{Prefix: "conversation: ", Err: cause, After: 3 * time.Second})
	if !IsTransient(err) || !errors.Is(err, cause) || AfterOf(err) != 3*time.Second {
		t.Fatalf("IsTransient %v, Is %v, AfterOf %v", IsTransient(err), errors.Is(err, cause), AfterOf(err))
	}
	if got := err.Error(); got != "wrapped: conversation: connection reset" {
		t.Fatalf("Error() = %q", got)
	}
	if IsTransient(cause) || AfterOf(cause) != 0 {
		t.Fatal("a plain error is transient")
	}
}
