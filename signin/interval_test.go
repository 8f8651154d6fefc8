package signin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// PA-4.6-04: interval and expires_in are honoured as the
// Company sends them. An interval over 10 minutes is waited in full (no
// poll sooner), and polling goes on until an expires_in over an hour has
// passed; the User is shown that expiry.
func TestPA_4_6_04_IntervalAndExpiryAsSent(t *testing.T) {
	const interval, ttl = 15 * time.Minute, 2 * time.Hour
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceInterval: interval, DeviceCodeTTL: ttl}}, nil)
	sess := e.Session("alice")
	b := e.browser()
	b.noVisit = true // the User never finishes
	start := e.Srv.Clock().Now()
	bound, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := signin.Device(bound, sess, scopes("poppy:read"), b)
	cancel()
	if !errors.Is(err, signin.ErrDeviceCodeExpired) {
		t.Fatalf("Device: %v, want ErrDeviceCodeExpired", err)
	}
	if len(b.codes) != 1 || b.codes[0].Expires.Sub(start.Add(ttl)).Abs() > time.Second {
		t.Fatalf("prompt expiry %v, want %v", b.codes[0].Expires, start.Add(ttl))
	}
	ps := polls(e)
	if len(ps) != int(ttl/interval)-1 {
		t.Errorf("%d polls, want %d: one every %v until the code expires", len(ps), int(ttl/interval)-1, interval)
	}
	for i := 1; i < len(ps); i++ {
		if gap := ps[i].Time.Sub(ps[i-1].Time); gap < interval {
			t.Fatalf("polls %d and %d %v apart, want at least %v", i-1, i, gap, interval)
		}
	}
	if last := ps[len(ps)-1].Time.Sub(start); last <= time.Hour {
		t.Fatalf("last poll %v after the start: polling stopped before the code expired", last)
	}
}

// An interval longer than expires_in is the Company's
// error, refused before the User sees a code.
func TestDeviceIntervalLongerThanExpiry(t *testing.T) {
	e, h := hostileEnv(t, nil, nil)
	h.OnJSON(devicePath, func(m map[string]any) { m["interval"] = json.Number("601"); m["expires_in"] = json.Number("600") })
	b := e.browser()
	_, err := signin.Device(ctx, e.Session("alice"), scopes("poppy:read"), b)
	if err == nil || len(b.codes) != 0 || len(polls(e)) != 0 {
		t.Fatalf("Device: %v, %d prompts, %d polls; want the response refused", err, len(b.codes), len(polls(e)))
	}
}

// PA-4.6-05: one rule for every interval that is not a
// count of at least one second: 0, negative and 1e-9 all wait the default
// 5 s, as an absent one does.
func TestPA_4_6_05_UnusableIntervalIsDefault(t *testing.T) {
	for _, v := range []any{nil, json.Number("0"), json.Number("-1"), json.Number("1e-9"), json.Number("0.5"), "7"} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			e, h := hostileEnv(t, nil, nil)
			h.OnJSON(devicePath, func(m map[string]any) {
				if v == nil {
					delete(m, "interval")
				} else {
					m["interval"] = v
				}
			})
			e.Srv.SignIn().HoldDevicePolls(1)
			if _, err := signin.Device(ctx, e.Session("alice"), scopes("poppy:read"), e.browser()); err != nil {
				t.Fatal(err)
			}
			ps := polls(e)
			if len(ps) != 2 {
				t.Fatalf("%d polls, want 2", len(ps))
			}
			// (The fake clock also moves with real time.)
			if gap := ps[1].Time.Sub(ps[0].Time); gap < 5*time.Second || gap >= 6*time.Second {
				t.Fatalf("interval %v: polls %v apart, want the default 5 s", v, gap)
			}
		})
	}
}
