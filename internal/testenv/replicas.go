package testenv

// Replicas of an agent product on one shared keystore (spec 4.8): several
// OS processes serve the same signed-in Users at once, against a fake
// Company that rotates Account Tokens on every use and issues Session
// Tokens of a few seconds, while replicas are killed.
//
// The parent (ReplicaRun) starts the fake, signs every User in, and runs
// the children (the test binary again, with ReplicaChildMain called first
// in TestMain). It talks to each child one line at a time on stdin and
// stdout, as package storetest does:
//
//	child:  ready          every User's Session started or resumed
//	parent: go             start calling
//	parent: crash          die (os.Exit) inside the next Account Token
//	                       Update, after the Company answered the refresh
//	                       and before the store saved it: the rotation is
//	                       lost, as with a kill -9 at the worst moment
//	parent: stop           stop calling, check every User, report
//	child:  stats {json}   what the child saw
//
// Each child calls GET /orders (an account call) for each User every
// CallEvery or so. ErrSignInRequired is what a User whose rotation was lost
// must get: the child then checks the signed-out Session works (GET
// /products) and signs the User in again. At "stop" each User must get a 200
// from /orders within three tries (signing in again if asked): otherwise the
// User is stuck.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

const (
	envReplicaChild = "POPPY_TEST_REPLICA_CHILD" // the replica's number
	envReplicaStore = "POPPY_TEST_REPLICA_STORE" // what open gets
	envReplicaKey   = "POPPY_TEST_REPLICA_KEY"   // the agent's private JWK
	envReplicaUsers = "POPPY_TEST_REPLICA_USERS" // how many Users
	envReplicaEvery = "POPPY_TEST_REPLICA_EVERY" // CallEvery
	envReplicaAPI   = "POPPY_TEST_REPLICA_API"   // the fake's API URL
	// envReplicaAligned, when set, has every replica call for a User at
	// the same moments (ReplicaOptions.Aligned).
	envReplicaAligned = "POPPY_TEST_REPLICA_ALIGNED"
	// envReplicaEvents names a file each replica appends a line to when a
	// User gets sign_in_required, so that a replica killed later still
	// leaves its record.
	envReplicaEvents = "POPPY_TEST_REPLICA_EVENTS"
	// envReplicaWrites names a file each replica appends a line to when an
	// Account Token Update's fn returns a new record ("w") and when the
	// Update returns ("c"), so that the rotations a killed replica had
	// obtained and not yet written can be counted.
	envReplicaWrites = "POPPY_TEST_REPLICA_WRITES"
	// envReplicaNoCheck, set in a load run's environment, skips the final
	// check of every User (which takes minutes at 10,000 Users).
	envReplicaNoCheck = "POPPY_TEST_REPLICA_NOCHECK"
)

// ReplicaOptions configures ReplicaRun. Zero fields take the defaults.
type ReplicaOptions struct {
	Processes int           // replicas; default 3
	Users     int           // signed-in Users; default 20
	TokenTTL  time.Duration // Session Token lifetime; default 2 s
	CallEvery time.Duration // each replica calls for each User about this often; default 200 ms
	Steady    time.Duration // the run before any kill, measured; default 4 s
	Kills     bool          // then kill replicas: one armed crash, one random kill -9
	After     time.Duration // the run after the kills; default 3 s
	// Aligned has every replica call for User i at the same moments,
	// every CallEvery at an offset of i's own, as replicas fanning out one
	// event would: each renewal is then wanted by every replica at once,
	// the worst case for duplicate refreshes and for the store's locks.
	// Without it each replica calls at random around CallEvery.
	Aligned bool
	// Kill9, after the steady run, kills replica 1 with SIGKILL this many
	// times at random moments, restarting it after each kill and running
	// Kill9Every (default two token lifetimes and a call interval) before
	// the next, so that every rotation a kill lost shows before the next
	// kill: ReplicaStats.LostPerKill counts them kill by kill. It takes the
	// place of Kills (no armed crash), and needs 2 or more Processes.
	Kill9      int
	Kill9Every time.Duration
	// RotationGrace is the fake Company's rotation grace
	// (poppytest.Options.RotationGrace): an Account Token a rotation
	// replaced keeps working that long.
	RotationGrace time.Duration
}

// ReplicaStats are the figures of a run.
type ReplicaStats struct {
	Users, Processes int
	// Refreshes is the number of refresh grants in the steady run, and
	// PerLifetime their number per User per Session Token lifetime, where
	// a duplicate is a refresh for a Session that had one less than half a
	// renewal interval before (the ideal is 1).
	Refreshes   int
	Duplicates  int
	PerLifetime float64
	// PerInterval, in a run of more than 1,000 Users, is the refreshes per
	// User per renewal interval (at most 1 when none is duplicated, less
	// since a renewal waits for a call).
	PerInterval float64
	// LostRotations is the number of rotated-away Account Tokens the
	// Company was sent (each a rotation a killed replica lost), and
	// LostPerKill, with Kill9, how many came after each kill (before the
	// next). LostBeforeKills counts those of the steady run, which no kill
	// caused (a refresh answer that came after the SDK stopped waiting).
	LostRotations   int
	LostPerKill     []int
	LostBeforeKills int
	// PendingPerKill, with Kill9, counts for each kill the Account Token
	// records the killed replica had obtained from fn and not yet
	// committed: the rotations lost while waiting for their write.
	// InFlightPerKill counts the Account Token Updates whose fn (the
	// refresh) had not returned: at most that many more rotations were
	// lost, answered at the Company and not yet read or handled. Lost
	// rotations beyond the two were not the kill's (a refresh answered
	// after the SDK stopped waiting).
	PendingPerKill, InFlightPerKill []int
	// NewSessions counts Sessions started during the run (each lost
	// rotation should start one new, signed-out Session).
	NewSessions int
	// SignIns counts the sign-ins during the run: Users signing in again
	// after sign_in_required (a replica killed later reports no figures,
	// so this is counted at the Company).
	SignIns int
	// CrashedSignIns counts Sessions a kill left signed in at the Company
	// and signed out in the store.
	CrashedSignIns int
	// SignInRequired counts the calls answered ErrSignInRequired in every
	// replica, killed ones included, and SignInRequiredMax the most one
	// replica process got for one User.
	SignInRequired, SignInRequiredMax int
	// Child sums what the replicas reported.
	Child replicaChildStats
	// TokenRequests and APIRequests count the fake's requests in all.
	TokenRequests, APIRequests int
}

type replicaChildStats struct {
	OK            int64            `json:"ok"`
	SignInAsked   int64            `json:"sign_in_required"`
	SignedOutFail int64            `json:"signed_out_fail"`
	SignInFail    int64            `json:"sign_in_fail"`
	Errors        map[string]int64 `json:"errors"`
	Stuck         []string         `json:"stuck"`
	Store         map[string]int64 `json:"store,omitempty"`
}

func (s *replicaChildStats) add(o replicaChildStats) {
	s.OK += o.OK
	s.SignInAsked += o.SignInAsked
	s.SignedOutFail += o.SignedOutFail
	s.SignInFail += o.SignInFail
	if s.Errors == nil {
		s.Errors = map[string]int64{}
	}
	for k, v := range o.Errors {
		s.Errors[k] += v
	}
	s.Stuck = append(s.Stuck, o.Stuck...)
	if len(o.Store) > 0 && s.Store == nil {
		s.Store = map[string]int64{}
	}
	for k, v := range o.Store {
		if strings.HasSuffix(k, "_p50_us") || strings.HasSuffix(k, "_p99_us") || k == "pool_size" {
			s.Store[k] = max(s.Store[k], v) // the worst replica's
			continue
		}
		s.Store[k] += v
	}
}

// ReplicaUser names the i-th User of a run.
func ReplicaUser(i int) string { return fmt.Sprintf("user-%05d", i) }

// ReplicaRun runs a replica test (see the file comment) on store, which the
// children open with open(spec) from ReplicaChildMain, and fails t when a
// User ends stuck, a lost rotation does not end in sign_in_required, or
// (without kills) the replicas refresh more than 1.05 times per lifetime.
func ReplicaRun(t testing.TB, store keystore.Store, spec string, opts *ReplicaOptions) *ReplicaStats {
	t.Helper()
	o := ReplicaOptions{Processes: 3, Users: 20, TokenTTL: 2 * time.Second, CallEvery: 200 * time.Millisecond,
		Steady: 4 * time.Second, After: 3 * time.Second}
	if opts != nil {
		o.Kills, o.Aligned, o.Kill9, o.RotationGrace = opts.Kills, opts.Aligned, opts.Kill9, opts.RotationGrace
		for _, f := range [][2]*time.Duration{{&o.TokenTTL, &opts.TokenTTL}, {&o.CallEvery, &opts.CallEvery},
			{&o.Steady, &opts.Steady}, {&o.After, &opts.After}, {&o.Kill9Every, &opts.Kill9Every}} {
			if *f[1] > 0 {
				*f[0] = *f[1]
			}
		}
		if opts.Processes > 0 {
			o.Processes = opts.Processes
		}
		if opts.Users > 0 {
			o.Users = opts.Users
		}
	}
	if o.Kill9Every == 0 {
		o.Kill9Every = 2*o.TokenTTL + o.CallEvery
	}
	if o.Kill9 > 0 && o.Processes < 2 {
		t.Fatalf("Kill9 needs 2 or more replicas, not %d", o.Processes)
	}
	// A small run keeps every request, to find duplicate refreshes; a load
	// run only counts them.
	big := o.Users > 1000
	load := poppytest.LoadOptions{LogSize: -1}
	if big {
		load = poppytest.LoadOptions{ViolationsOnly: true, ForgetTokensAfter: time.Minute}
	}
	e := New(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true, RotationGrace: o.RotationGrace}, Tokens: poppytest.TokenPolicy{TTL: o.TokenTTL}, Load: load}, &poppy.AgentOptions{Store: store})
	ctx := context.Background()
	// Sign every User in, a few at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range o.Users {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := e.Company("example.test").Session(ctx, ReplicaUser(i), nil)
			if err == nil {
				err = replicaSignIn(ctx, s)
			}
			if err != nil {
				t.Errorf("signing %s in: %v", ReplicaUser(i), err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t0 := time.Now()
	t.Logf("%d Users signed in", o.Users)
	priv, err := e.Key.MarshalPrivateJWK()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), e.Srv.Env()...)
	env = append(env, envReplicaStore+"="+spec, envReplicaKey+"="+string(priv),
		envReplicaUsers+"="+strconv.Itoa(o.Users), envReplicaEvery+"="+o.CallEvery.String(),
		envReplicaAPI+"="+e.Srv.EndpointURL(poppytest.EndpointAPI))
	if o.Aligned {
		env = append(env, envReplicaAligned+"=1")
	}
	events := filepath.Join(t.TempDir(), "sign-in-required")
	env = append(env, envReplicaEvents+"="+events)
	writes := filepath.Join(t.TempDir(), "writes")
	if o.Kill9 > 0 {
		env = append(env, envReplicaWrites+"="+writes)
	}
	start := func(i int) *replicaChild {
		c := startReplica(t, i, env)
		c.expect(t, "ready")
		c.send(t, "go")
		return c
	}
	children := make([]*replicaChild, o.Processes)
	for i := range children {
		children[i] = startReplica(t, i, env)
	}
	for _, c := range children {
		c.expect(t, "ready")
	}
	for _, c := range children {
		c.send(t, "go")
	}
	t.Logf("%d replicas started every Session in %v", o.Processes, time.Since(t0).Round(time.Millisecond))
	before := e.Srv.Counts()
	steadyFrom := before.Requests
	heap0 := liveHeap()
	time.Sleep(o.Steady)
	after := e.Srv.Counts()
	heap1 := liveHeap()
	t.Logf("steady run: %.0f API calls/s, %.0f token requests/s; the fake's process heap %d MB, then %d MB",
		float64(after.ByEndpoint[poppytest.EndpointAPI]-before.ByEndpoint[poppytest.EndpointAPI])/o.Steady.Seconds(),
		float64(after.ByEndpoint[poppytest.EndpointToken]-before.ByEndpoint[poppytest.EndpointToken])/o.Steady.Seconds(),
		heap0>>20, heap1>>20)
	var steady []poppytest.Request
	if !big {
		for _, r := range e.Srv.Requests() {
			if r.Index >= steadyFrom && r.Index < after.Requests {
				steady = append(steady, r)
			}
		}
	}
	// The Company's violations, taken as the run goes so that each kill's
	// lost rotations can be told apart.
	var violations []poppytest.Violation
	lost := func() int {
		vs := e.Srv.TakeViolations()
		violations = append(violations, vs...)
		n := 0
		for _, v := range vs {
			if v.Rule == "PA-4.8-04" {
				n++
			}
		}
		return n
	}
	st := &ReplicaStats{Users: o.Users, Processes: o.Processes}
	var killed []string // the killed replicas, as they name themselves in the writes file
	if o.Kill9 > 0 {
		st.LostBeforeKills = lost()
		for k := range o.Kill9 {
			time.Sleep(time.Duration(rand.N(int64(time.Second))))
			killed = append(killed, "1/"+strconv.Itoa(children[1].cmd.Process.Pid))
			children[1].kill()
			t0 := time.Now()
			children[1] = start(1)
			restart := time.Since(t0)
			time.Sleep(o.Kill9Every)
			st.LostPerKill = append(st.LostPerKill, lost())
			t.Logf("kill -9 %d of replica 1: restarted in %v; %d rotations lost", k+1, restart.Round(time.Millisecond), st.LostPerKill[k])
		}
	}
	if o.Kills {
		// A crash at the worst moment: the rotation is lost.
		children[0].send(t, "crash")
		children[0].waitDead(t, 30*time.Second)
		children[0] = start(0)
		time.Sleep(time.Duration(rand.N(int64(time.Second))) + 300*time.Millisecond)
		// A kill -9 at a random moment.
		if o.Processes > 1 {
			children[1].kill()
			children[1] = start(1)
		}
		time.Sleep(o.After)
	}
	t0 = time.Now()
	for i, c := range children {
		c.send(t, "stop")
		line := c.next(t)
		js, ok := strings.CutPrefix(line, "stats ")
		if !ok {
			t.Fatalf("replica %d: got %q, want stats", i, line)
		}
		var cs replicaChildStats
		if err := json.Unmarshal([]byte(js), &cs); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		st.Child.add(cs)
		c.wait(t)
	}
	t.Logf("the replicas checked every User in %v", time.Since(t0).Round(time.Millisecond))
	renewEvery := o.TokenTTL - max(min(o.TokenTTL/10, time.Minute), min(time.Second, o.TokenTTL/2))
	if big {
		// The log holds too little: the fake counts the renewals that came
		// less than half a lifetime after the last (Counts.EarlyRenewals);
		// every User is signed in, so each renewal is a refresh.
		st.Refreshes = after.Grants["refresh_token"] - after.GrantErrors["refresh_token"] -
			(before.Grants["refresh_token"] - before.GrantErrors["refresh_token"])
		st.Duplicates = after.EarlyRenewals - before.EarlyRenewals
		if st.Refreshes > st.Duplicates {
			st.PerLifetime = float64(st.Refreshes) / float64(st.Refreshes-st.Duplicates)
		}
		// At most 1 per renewal interval when none is duplicated, less
		// since a renewal waits for a call.
		st.PerInterval = float64(st.Refreshes) / (float64(o.Users) * o.Steady.Seconds() / renewEvery.Seconds())
		t.Logf("%.3f refreshes per User per renewal interval of %v", st.PerInterval, renewEvery)
	} else {
		st.Refreshes, st.Duplicates = countRefreshes(steady, renewEvery/2)
		if st.Refreshes > 0 {
			st.PerLifetime = float64(st.Refreshes) / float64(st.Refreshes-st.Duplicates)
		}
	}
	all := e.Srv.Requests()
	final := e.Srv.Counts()
	st.TokenRequests, st.APIRequests = final.ByEndpoint[poppytest.EndpointToken], final.ByEndpoint[poppytest.EndpointAPI]
	// Counted by the fake, not from its log, which a load run doesn't keep.
	st.NewSessions = final.SessionsStarted - before.SessionsStarted
	st.SignIns = final.SignIns - before.SignIns
	if os.Getenv("POPPY_TEST_REPLICA_DEBUG") != "" {
		for _, r := range all {
			if r.Index >= steadyFrom && r.Endpoint == poppytest.EndpointToken && (r.Status != 200 || r.Form.Get("grant_type") != "refresh_token") || r.Endpoint == poppytest.EndpointSignIn {
				t.Logf("%d %s %s %s sid=%s -> %d %s %s", r.Index, r.Time.Format("05.000"), r.Endpoint, r.Form.Get("grant_type"), r.Form.Get("session_id"), r.Status, r.ErrorCode, r.SessionID)
			}
		}
	}
	if b, err := os.ReadFile(events); err == nil || errors.Is(err, os.ErrNotExist) {
		per := map[string]int{}
		for _, line := range strings.Fields(string(b)) {
			per[line]++
			st.SignInRequired++
			st.SignInRequiredMax = max(st.SignInRequiredMax, per[line])
		}
	} else {
		t.Fatal(err)
	}
	lost()
	for _, v := range violations {
		if v.Rule == "PA-4.8-04" {
			st.LostRotations++
			continue
		}
		if v.Rule == "PA-4.2-15" && (o.Kills || o.Kill9 > 0) {
			// A replica killed after the Company signed a Session in and
			// before its record said so: the next replica renews it with the
			// assertion once, and starts a new one when refused.
			st.CrashedSignIns++
			continue
		}
		t.Errorf("violation %v", v)
	}
	t.Logf("%d replicas, %d Users, Session Tokens of %v: %d refreshes in %v steady (%d duplicates: %.3f per User per lifetime); "+
		"%d lost rotations, %d new Sessions, %d sign-ins, %d sign_in_required (at most %d for one User in one replica), %d calls ok, errors %v; %d token and %d API requests; store %v",
		o.Processes, o.Users, o.TokenTTL, st.Refreshes, o.Steady, st.Duplicates, st.PerLifetime,
		st.LostRotations, st.NewSessions, st.SignIns, st.SignInRequired, st.SignInRequiredMax, st.Child.OK, st.Child.Errors, st.TokenRequests, st.APIRequests, st.Child.Store)
	perReplica := float64(st.Refreshes) / o.Steady.Seconds() / float64(o.Processes)
	if n, us := st.Child.Store["at_writes"], st.Child.Store["at_write_us"]; n > 0 {
		mean := time.Duration(us/n) * time.Microsecond
		t.Logf("Account Token writes, fn's return to commit: mean %v, p50 %v, p99 %v (worst replica); %.1f refreshes/s per replica in the steady run, "+
			"so a kill at a random moment finds %.2f rotations waiting for their commit",
			mean, time.Duration(st.Child.Store["at_write_p50_us"])*time.Microsecond, time.Duration(st.Child.Store["at_write_p99_us"])*time.Microsecond,
			perReplica, perReplica*mean.Seconds())
	}
	if o.Kill9 > 0 {
		st.PendingPerKill, st.InFlightPerKill = pendingWrites(t, writes, killed)
		t.Logf("%d kill -9s lost %v rotations (%.1f per kill), of which %v were waiting for their write (%d in all) and at most %v in a refresh (%d); %d lost in the steady run before them",
			o.Kill9, st.LostPerKill, float64(st.LostRotations-st.LostBeforeKills)/float64(o.Kill9),
			st.PendingPerKill, sum(st.PendingPerKill), st.InFlightPerKill, sum(st.InFlightPerKill), st.LostBeforeKills)
	}
	if len(st.Child.Stuck) > 0 {
		t.Errorf("%d Users stuck: %s", len(st.Child.Stuck), strings.Join(st.Child.Stuck[:min(5, len(st.Child.Stuck))], "; "))
	}
	if st.Child.SignedOutFail > 0 || st.Child.SignInFail > 0 {
		t.Errorf("after sign_in_required: %d signed-out calls failed, %d sign-ins failed", st.Child.SignedOutFail, st.Child.SignInFail)
	}
	if st.PerLifetime > 1.05 {
		t.Errorf("%.3f refreshes per User per lifetime across %d replicas, want at most 1.05", st.PerLifetime, o.Processes)
	}
	if o.Kills && st.LostRotations == 0 {
		t.Errorf("the armed crash lost no rotation: the test did not test it")
	}
	if o.Kills || o.Kill9 > 0 && st.LostRotations > 0 {
		// Every lost rotation ends in sign_in_required (then a sign-in);
		// each starts one new Session, or none when the Company let the
		// old one renew signed out.
		// ... in sign_in_required once in a replica, not again and again.
		if st.SignInRequired == 0 {
			t.Errorf("%d lost rotations and no replica got sign_in_required", st.LostRotations)
		}
		if st.SignInRequiredMax > st.LostRotations {
			t.Errorf("one replica got sign_in_required %d times for one User, for %d lost rotations", st.SignInRequiredMax, st.LostRotations)
		}
		// Without the final check (a load run's POPPY_TEST_REPLICA_NOCHECK)
		// the Users whose rotation the last kill lost may not have been
		// called since.
		if st.SignIns < st.LostRotations && os.Getenv(envReplicaNoCheck) == "" {
			t.Errorf("%d lost rotations but %d Users signed in again after sign_in_required", st.LostRotations, st.SignIns)
		}
		if st.NewSessions > st.LostRotations+st.CrashedSignIns {
			t.Errorf("%d new Sessions for %d lost rotations and %d crashed sign-ins: want at most one each", st.NewSessions, st.LostRotations, st.CrashedSignIns)
		}
	}
	return st
}

// pendingWrites reads the writes file and returns, for each of the killed
// replicas, how many Users' Account Token Updates had a new record from fn
// not yet committed, and how many were in fn.
func pendingWrites(t testing.TB, path string, killed []string) (pending, inFn []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	type counts struct{ write, fn int }
	open := map[string]map[string]*counts{} // replica -> User -> open
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		if open[f[1]] == nil {
			open[f[1]] = map[string]*counts{}
		}
		c := open[f[1]][f[2]]
		if c == nil {
			c = &counts{}
			open[f[1]][f[2]] = c
		}
		switch f[0] {
		case "w":
			c.write++
		case "c":
			c.write--
		case "f":
			c.fn++
		case "e":
			c.fn--
		}
	}
	for _, r := range killed {
		p, n := 0, 0
		for _, c := range open[r] {
			p += max(c.write, 0)
			n += max(c.fn, 0)
		}
		pending, inFn = append(pending, p), append(inFn, n)
	}
	return pending, inFn
}

func sum(n []int) int {
	s := 0
	for _, v := range n {
		s += v
	}
	return s
}

// liveHeap returns the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// countRefreshes counts the successful refresh grants in rs and those that
// came less than dup after the previous one for the same Session.
func countRefreshes(rs []poppytest.Request, dup time.Duration) (n, dups int) {
	last := map[string]time.Time{}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Time.Before(rs[j].Time) })
	for _, r := range rs {
		if r.Endpoint != poppytest.EndpointToken || r.Form.Get("grant_type") != "refresh_token" || r.Status != 200 {
			continue
		}
		n++
		sid := r.SessionID
		if prev, ok := last[sid]; ok && r.Time.Sub(prev) < dup {
			dups++
		}
		last[sid] = r.Time
	}
	return n, dups
}

func replicaSignIn(ctx context.Context, s *poppy.Session) error {
	u := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	_, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, u)
	return err
}

// replicaSilence bounds each wait for a replica's next line: starting
// 10,000 Sessions on a loaded machine takes minutes.
const replicaSilence = 10 * time.Minute

type replicaChild struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	errb *strings.Builder
	done chan struct{}
}

func startReplica(t testing.TB, i int, env []string) *replicaChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(slices.Clone(env), envReplicaChild+"="+strconv.Itoa(i))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &replicaChild{cmd: cmd, in: in, out: bufio.NewScanner(out), errb: &errb, done: make(chan struct{})}
	c.out.Buffer(nil, 1<<20)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c
}

func (c *replicaChild) next(t testing.TB) string {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		if c.out.Scan() {
			line <- c.out.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			<-c.done
			t.Fatalf("replica ended: %v\n%s", c.cmd.ProcessState, c.errb.String())
		}
		return l
	case <-time.After(replicaSilence):
		t.Fatalf("replica silent for %v\n%s", replicaSilence, c.errb.String())
	}
	return ""
}

func (c *replicaChild) expect(t testing.TB, want string) {
	t.Helper()
	if got := c.next(t); got != want {
		t.Fatalf("replica said %q, want %q\n%s", got, want, c.errb.String())
	}
}

func (c *replicaChild) send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatalf("to replica: %v", err)
	}
}

func (c *replicaChild) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

func (c *replicaChild) waitDead(t testing.TB, limit time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(limit):
		c.kill()
		t.Fatalf("the armed replica did not crash within %v", limit)
	}
}

func (c *replicaChild) wait(t testing.TB) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatalf("replica did not exit")
	}
	if !c.cmd.ProcessState.Success() {
		t.Fatalf("replica failed: %v\n%s", c.cmd.ProcessState, c.errb.String())
	}
}

// ReplicaChildMain does a replica's part of ReplicaRun and exits, or returns
// at once in any other process. open opens the store named by the spec the
// parent passed. If the store has a LoadStats() map[string]int64 method, its
// figures are reported with the child's (counters summed over the replicas;
// keys ending in _p50_us or _p99_us, and pool_size, the largest), from the
// moment the run starts if it also has ResetLoadStats(). If it has an
// OnCommit(func(keystore.Key)) method, it must call the function it is
// given as each write commits, before its Update returns: with Kill9, the
// rotations a killed replica had not yet written are counted from it.
func ReplicaChildMain(open func(spec string) (keystore.Store, error)) {
	if os.Getenv(envReplicaChild) == "" {
		return
	}
	if err := runReplica(open); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// crashStore dies inside the next Account Token Update once armed, after
// fn (the refresh) ran and before anything is written. With a writes file,
// it notes there each Account Token Update whose fn returned a new record,
// and its commit: told by the store if it has an OnCommit(func(Key))
// method, or else the Update's return.
type crashStore struct {
	keystore.Store
	armed    atomic.Bool
	writes   *os.File
	me       string
	onCommit bool // the store tells of each commit
}

func (c *crashStore) committed(key keystore.Key) {
	if key.Kind == keystore.KindAccountToken {
		_, _ = c.writes.WriteString("c " + c.me + " " + key.User + "\n")
	}
}

func (c *crashStore) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	if key.Kind == keystore.KindAccountToken && c.writes != nil && !c.armed.Load() {
		wrote := false
		err := c.Store.Update(ctx, key, func(cur []byte) ([]byte, error) {
			// One write per line, appended: whole lines, and in the
			// kernel's hands before a kill.
			_, _ = c.writes.WriteString("f " + c.me + " " + key.User + "\n")
			next, err := fn(cur)
			_, _ = c.writes.WriteString("e " + c.me + " " + key.User + "\n")
			if err == nil && !bytes.Equal(next, cur) {
				wrote = true
				_, _ = c.writes.WriteString("w " + c.me + " " + key.User + "\n")
			}
			return next, err
		})
		if wrote && !c.onCommit {
			c.committed(key)
		}
		return err
	}
	if key.Kind != keystore.KindAccountToken || !c.armed.Load() {
		return c.Store.Update(ctx, key, fn)
	}
	return c.Store.Update(ctx, key, func(cur []byte) ([]byte, error) {
		next, err := fn(cur)
		if err == nil && cur != nil && next != nil && string(next) != string(cur) {
			os.Exit(3) // killed: the rotated Account Token is lost
		}
		return next, err
	})
}

func runReplica(open func(string) (keystore.Store, error)) error {
	ctx := context.Background()
	inner, err := open(os.Getenv(envReplicaStore))
	if err != nil {
		return err
	}
	if c, ok := inner.(interface{ Close() error }); ok {
		defer c.Close()
	}
	me := os.Getenv(envReplicaChild) + "/" + strconv.Itoa(os.Getpid())
	store := &crashStore{Store: inner, me: me}
	if path := os.Getenv(envReplicaWrites); path != "" {
		if store.writes, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			return err
		}
		defer store.writes.Close()
		if oc, ok := inner.(interface{ OnCommit(func(keystore.Key)) }); ok {
			oc.OnCommit(store.committed)
			store.onCommit = true
		}
	}
	c, err := childCompany(ctx, store, envReplicaKey)
	if err != nil {
		return err
	}
	users, _ := strconv.Atoi(os.Getenv(envReplicaUsers))
	every, _ := time.ParseDuration(os.Getenv(envReplicaEvery))
	api := os.Getenv(envReplicaAPI)
	sessions := make([]*poppy.Session, users)
	{
		// A replica that starts must start every User's Session, whatever
		// the others left behind.
		var wg sync.WaitGroup
		errs := make([]error, users)
		sem := make(chan struct{}, 16*runtime.GOMAXPROCS(0))
		for _, i := range rand.Perm(users) {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				sessions[i], errs[i] = c.Session(ctx, ReplicaUser(i), nil)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("starting Sessions: %w", err)
		}
	}
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	if !in.Scan() || in.Text() != "go" {
		return errors.New("no go")
	}
	if r, ok := inner.(interface{ ResetLoadStats() }); ok {
		r.ResetLoadStats() // the store's figures are the run's, not the start's
	}
	var (
		mu    sync.Mutex
		stats = replicaChildStats{Errors: map[string]int64{}}
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	count := func(f func(*replicaChildStats)) {
		mu.Lock()
		f(&stats)
		mu.Unlock()
	}
	call := func(s *poppy.Session, path string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+path, nil)
		resp, err := s.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return poppy.ResponseError(resp)
	}
	errKind := func(err error) string {
		var pe *poppy.Error
		if errors.As(err, &pe) {
			return pe.Code + " " + strconv.Itoa(pe.Status)
		}
		return err.Error()
	}
	aligned := os.Getenv(envReplicaAligned) != ""
	var events *os.File
	if path := os.Getenv(envReplicaEvents); path != "" {
		if events, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			return err
		}
		defer events.Close()
	}
	signInRequired := func(i int) {
		count(func(st *replicaChildStats) { st.SignInAsked++ })
		if events != nil {
			// One write per line, appended: whole lines even with several
			// processes writing, and on disk before a kill.
			_, _ = events.WriteString(me + ":" + ReplicaUser(i) + "\n")
		}
	}
	for i, s := range sessions {
		wg.Add(1)
		// Aligned: User i is called at offset + k*every on the wall clock,
		// which every replica on the machine shares.
		offset := time.Duration(int64(every) * int64(i) / int64(len(sessions)))
		next := func() time.Duration {
			if !aligned {
				return every/2 + time.Duration(rand.N(int64(every)))
			}
			now := time.Duration(time.Now().UnixNano())
			return every - (now-offset)%every
		}
		go func() {
			defer wg.Done()
			first := time.Duration(rand.N(int64(every)))
			if aligned {
				first = next()
			}
			t := time.NewTimer(first)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				t.Reset(next())
				err := call(s, "/orders")
				switch {
				case err == nil:
					count(func(st *replicaChildStats) { st.OK++ })
				case errors.Is(err, poppy.ErrSignInRequired):
					signInRequired(i)
					if err := call(s, "/products"); err != nil {
						count(func(st *replicaChildStats) { st.SignedOutFail++ })
					}
					if err := replicaSignIn(ctx, s); err != nil {
						count(func(st *replicaChildStats) { st.SignInFail++ })
					}
				default:
					count(func(st *replicaChildStats) { st.Errors[errKind(err)]++ })
				}
			}
		}()
	}
	for in.Scan() {
		switch in.Text() {
		case "crash":
			store.armed.Store(true)
			continue
		case "stop":
		default:
			continue
		}
		break
	}
	close(stop)
	wg.Wait()
	// Every User ends with a working account call: many at a time, each
	// replica in an order of its own.
	sem := make(chan struct{}, 32)
	check := sessions
	if os.Getenv(envReplicaNoCheck) != "" {
		check = nil // a load run: the figures only
	}
	for _, i := range rand.Perm(len(check)) {
		s := sessions[i]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var err error
			for range 3 {
				if err = call(s, "/orders"); errors.Is(err, poppy.ErrSignInRequired) {
					signInRequired(i)
					err = replicaSignIn(ctx, s)
					continue
				}
				if err == nil {
					break
				}
			}
			if err != nil {
				count(func(st *replicaChildStats) {
					st.Stuck = append(st.Stuck, fmt.Sprintf("%s: %s", ReplicaUser(i), errKind(err)))
				})
			}
		}()
	}
	wg.Wait()
	if ls, ok := inner.(interface{ LoadStats() map[string]int64 }); ok {
		stats.Store = ls.LoadStats()
	}
	b, err := json.Marshal(&stats)
	if err != nil {
		return err
	}
	fmt.Println("stats " + string(b))
	return nil
}
