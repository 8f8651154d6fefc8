package poppy

// Durations a Company sends.
//
// A Company states durations as counts of seconds: expires_in and
// refresh_token_expires_in in token responses (spec 4.2, 4.8), interval and
// expires_in in device authorization responses (RFC 8628 section 3.2),
// and Cache-Control max-age (RFC 9111 section 5.2.2.1); Retry-After is read
// by the SDK's one retry policy (internal/retry). As text, a count can be larger than any integer type,
// negative, fractional or absent; multiplied into a time.Duration
// unchecked, a large one overflows into a negative wait (a busy loop of
// polls) or an expiry in the past (a token request before every call).
//
// Every such value goes through companySeconds: it parses the count with
// arbitrary magnitude (a value too large for float64 is +Inf, never an
// error) and clamps it into a range chosen for that field, so no value a
// Company can write overflows or escapes the range. What an absent or
// non-positive value means is each field's rule and is decided by the
// caller:
//
//   - token expires_in: required and positive (PA-4.2-13), else a protocol
//     error; at most 30 days.
//   - refresh_token_expires_in: non-positive or absent means the Company
//     gave no expiry; at most 10 years.
//   - device interval and expires_in are honoured as the Company sends them
//     (PA-4.6-04, A-14), bounded only by what is absurd. expires_in is
//     required (RFC 8628 section 3.2) and positive, else an invalid
//     response; one over 30 days is read as 30 days (the caller's context
//     bounds the wait in any case). interval is absent, or not a count of
//     at least one second (0, negative, 1e-9, a string), means 5 s
//     (RFC 8628 section 3.2): one rule for every value that can't be
//     waited as sent. An interval longer than expires_in is the Company's
//     error, and the response is refused.
//   - max-age: at most 1 day, so a document is fetched again at least daily.

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationRange bounds one kind of duration a Company sends.
type durationRange struct{ min, max time.Duration }

var (
	rangeTokenLifetime   = durationRange{time.Second, 30 * 24 * time.Hour}
	rangeAccountLifetime = durationRange{time.Second, 10 * 365 * 24 * time.Hour}
	rangeDeviceInterval  = durationRange{time.Second, 30 * 24 * time.Hour}
	rangeDeviceExpiry    = durationRange{time.Second, 30 * 24 * time.Hour}
	rangeMaxAge          = durationRange{0, 24 * time.Hour}
)

// companySeconds reads raw, a count of seconds a Company sent (a JSON
// number, or the digits of a header), and returns it as a Duration clamped
// to r. positive reports whether the count was greater than zero; ok is
// false when raw is not a number at all (absent, null, a string). Fractions
// round up, so that "wait at least" never ends early.
func companySeconds(raw string, r durationRange) (d time.Duration, positive, ok bool) {
	f, ok := parseSeconds(raw)
	if !ok {
		return 0, false, false
	}
	return clampSeconds(f, r), f > 0, true
}

// parseSeconds parses a JSON number (which includes plain digits). A
// magnitude beyond float64 gives ±Inf.
func parseSeconds(raw string) (float64, bool) {
	raw = strings.TrimSpace(raw)
	if isDigits(raw) {
		// delta-seconds and max-age may have leading zeros; JSON may not.
		if raw = strings.TrimLeft(raw, "0"); raw == "" {
			raw = "0"
		}
	}
	if !isJSONNumber(raw) {
		return 0, false
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil && !isRangeErr(err) {
		return 0, false
	}
	return f, true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// clampSeconds converts f seconds to a Duration within r, rounding up.
func clampSeconds(f float64, r durationRange) time.Duration {
	if math.IsNaN(f) || f <= r.min.Seconds() {
		return r.min
	}
	if f >= r.max.Seconds() {
		return r.max
	}
	return min(time.Duration(math.Ceil(f*float64(time.Second))), r.max)
}

// clampDuration bounds a Duration computed from a Company's value (an
// HTTP-date minus now) to r.
func clampDuration(d time.Duration, r durationRange) time.Duration {
	return min(max(d, r.min), r.max)
}

// isJSONNumber reports whether s has the syntax of a JSON number
// (RFC 8259 section 6).
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == start || (s[start] == '0' && i-start > 1) {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	return i == len(s)
}

// isDigits reports whether s is one or more ASCII digits: the form of
// delta-seconds (RFC 9110 section 10.2.3).
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

// deviceDefaultInterval is RFC 8628's default polling interval (PA-4.6-05).
const deviceDefaultInterval = 5 * time.Second

// deviceDurations reads a device authorization response's interval and
// expires_in (RFC 8628 section 3.2), given as the raw JSON values ("" when
// absent), for AuthorizeDevice (deviceauth.go). Both are taken as
// sent (PA-4.6-04); an interval that is not a count of at least one second
// is absent (5 s, PA-4.6-05), and one longer than expires_in is refused.
func deviceDurations(interval, expiresIn string) (time.Duration, time.Duration, error) {
	exp, positive, ok := companySeconds(expiresIn, rangeDeviceExpiry)
	if !ok || !positive {
		return 0, 0, errors.New("poppy: device authorization response without a positive expires_in (RFC 8628 section 3.2)")
	}
	iv := deviceDefaultInterval // PA-4.6-05
	if f, ok := parseSeconds(interval); ok && f >= 1 {
		iv = clampSeconds(f, rangeDeviceInterval)
		if iv > exp {
			return 0, 0, errors.New("poppy: invalid device authorization response: interval is longer than expires_in")
		}
	}
	return iv, exp, nil
}
