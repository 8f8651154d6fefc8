package poppytest

import (
	"fmt"
	"testing"
	"time"
)

// CO-4.3-06, CO-4.2-02: a jti is refused for as long as its window lasts,
// and forgotten after, without rescanning the set: the set holds only what
// is inside the window however many jtis went through it.
func TestJTISetExpiresByTime(t *testing.T) {
	j := newJTISet()
	t0 := time.Unix(1000, 0)
	const window = 2 * time.Minute
	for i := range 100_000 {
		now := t0.Add(time.Duration(i) * 10 * time.Millisecond) // 100 per second
		key := fmt.Sprint(i)
		if j.seen(key, now) {
			t.Fatalf("jti %d seen before it was added", i)
		}
		j.add(key, now.Add(window), now)
		if i >= 10 && !j.seen(fmt.Sprint(i-10), now) {
			t.Fatalf("jti %d forgotten inside its window", i-10)
		}
	}
	// 100 per second for a 2-minute window: at most 12,000 remembered.
	if n := j.len(); n > 12_001 {
		t.Fatalf("%d jtis remembered, want at most the window's 12,000", n)
	}
	if len(j.q)-j.head > 12_001 || cap(j.q) > 4*12_001 {
		t.Fatalf("queue holds %d (cap %d)", len(j.q)-j.head, cap(j.q))
	}
	// A longer-lived entry ahead of shorter ones does not make them be
	// forgotten early.
	k := newJTISet()
	k.add("long", t0.Add(time.Hour), t0)
	k.add("short", t0.Add(time.Second), t0)
	if !k.seen("short", t0.Add(500*time.Millisecond)) || k.seen("short", t0.Add(2*time.Second)) || !k.seen("long", t0.Add(30*time.Minute)) {
		t.Fatal("jtiSet.seen is wrong")
	}
}

// The request log is a ring of LogSize requests; Index still numbers every
// request, Counts counts them all, and violations find their request.
func TestRequestLogRing(t *testing.T) {
	s := &Server{opts: Options{Load: LoadOptions{LogSize: 3}}, inflight: map[int]*Request{}}
	for i := range 7 {
		rec := &Request{Endpoint: EndpointAPI}
		s.logMu.Lock()
		s.logStartLocked(rec)
		s.logEndLocked(rec)
		s.logMu.Unlock()
		if i == 5 {
			s.violate(rec.Index, "PA-0", "test")
		}
	}
	rs := s.Requests()
	if len(rs) != 3 || rs[0].Index != 4 || rs[2].Index != 6 {
		t.Fatalf("log holds %v", rs)
	}
	if len(rs[1].Violations) != 1 {
		t.Fatalf("request 5 has violations %v", rs[1].Violations)
	}
	c := s.Counts()
	if c.Requests != 7 || c.Dropped != 4 || c.ByEndpoint[EndpointAPI] != 7 || c.Violations != 1 {
		t.Fatalf("counts %+v", c)
	}
	// Only violations.
	v := &Server{opts: Options{Load: LoadOptions{ViolationsOnly: true}}, inflight: map[int]*Request{}}
	for i := range 5 {
		rec := &Request{Endpoint: EndpointAPI}
		v.logMu.Lock()
		v.logStartLocked(rec)
		v.logMu.Unlock()
		if i == 2 {
			v.violate(rec.Index, "PA-0", "test")
		}
		v.logMu.Lock()
		v.logEndLocked(rec)
		v.logMu.Unlock()
	}
	if rs := v.Requests(); len(rs) != 1 || rs[0].Index != 2 || len(rs[0].Violations) != 1 {
		t.Fatalf("violations-only log holds %v", rs)
	}
	if c := v.Counts(); c.Requests != 5 || c.Dropped != 4 {
		t.Fatalf("counts %+v", c)
	}
}
