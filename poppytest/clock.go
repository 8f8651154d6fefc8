package poppytest

import (
	"context"
	"sync/atomic"
	"time"
)

// OffsetClock is the fake Company's clock: real time plus an offset that tests move
// forward. The fake checks every time-bound rule against it: token expiry,
// assertion and proof iat/exp, the jti replay window, rate-limit windows and
// HTTP caching (the Date header of every response is Clock time).
//
// Give the same Clock to the code under test (for example as the SDK's clock
// and sleep function) so that "the retry is sent at least 7 s later" is
// observable without waiting: [Clock.Sleep] advances the offset instead of
// blocking. The zero value is a clock with no offset; a Clock is safe for
// concurrent use.
type OffsetClock struct {
	offset atomic.Int64 // nanoseconds
}

// Now returns time.Now() plus the offset.
func (c *OffsetClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Advance moves the clock forward by d (backward if d is negative).
func (c *OffsetClock) Advance(d time.Duration) {
	c.offset.Add(int64(d))
}

// Offset reports how far the clock is ahead of real time.
func (c *OffsetClock) Offset() time.Duration {
	return time.Duration(c.offset.Load())
}

// Sleep is an auto-advancing sleep: it returns ctx.Err() if ctx is already
// done, and otherwise adds d to the offset at once and returns nil. Two
// goroutines sleeping 5 s each move the clock 10 s.
func (c *OffsetClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.Advance(d)
	}
	return nil
}
