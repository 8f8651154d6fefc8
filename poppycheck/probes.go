package poppycheck

// The probes a run makes only when asked: failed Mediated Sign-Ins in a
// row (Options.FailedSignIns, CO-4.7-06) and an operation proposed,
// approved by the person and confirmed (Options.Propose, CO-OPS6-01).
// Neither runs by default: the first sends what a correct agent never
// sends by itself (it stops at the first failed sign-in, PA-4.7-11), the
// second acts on the person's account.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
)

// mediatedProbeTime bounds the whole FailedSignIns probe: the rule is
// about attempts within a minute.
const mediatedProbeTime = time.Minute

// madeUpValue returns a credential value that can belong to no account:
// random, and for a field that asks for an email an address under the
// reserved .invalid domain (RFC 2606), which no mailbox has. Nothing
// comes from the environment.
func madeUpValue(name, label string, secret bool) string {
	if secret {
		return jose.RandomID(18)
	}
	if strings.Contains(strings.ToLower(name+" "+label), "mail") {
		return "poppycheck-" + strings.ToLower(jose.RandomID(9)) + "@poppycheck.invalid"
	}
	return "poppycheck-" + jose.RandomID(12) + ".invalid"
}

// mediatedRateLimit makes up to MediatedAttempts Mediated Sign-In
// attempts within a minute on Session s, with made-up credentials for one
// made-up account (the non-secret fields stay the same, a new secret each
// time), and wants one of them refused with 429 and a Retry-After it can
// read (CO-4.7-06; A-15: the limit shows as 429, as spec 4.3's rate
// limits do, since an agent can't tell a limit answered as failed from
// wrong credentials). It never retries a 429, and stops at the first
// answer other than failed.
func (p *prober) mediatedRateLimit(ctx context.Context, s *session) {
	m := p.c.mediated
	if m == nil {
		p.notObserved("the Company doesn't offer Mediated Sign-In", "CO-4.7-06")
		return
	}
	if !p.opts.FailedSignIns {
		return // the catalog's reason: run with --failed-sign-ins
	}
	ep, _ := m["endpoint"].(string) // p.c.mediated is set only for a usable endpoint (CO-3-11)
	p.step = "mediated rate limit"
	fields, _ := m["fields"].([]any)
	type field struct {
		name, label string
		secret      bool
	}
	var fs []field
	for _, f := range fields {
		fm, _ := f.(map[string]any)
		name, _ := fm["name"].(string)
		label, _ := fm["label"].(string)
		secret, _ := fm["secret"].(bool)
		if name != "" {
			fs = append(fs, field{name, label, secret})
		}
	}
	creds := map[string]string{}
	for _, f := range fs {
		if !f.secret {
			creds[f.name] = madeUpValue(f.name, f.label, false)
			p.secret(creds[f.name])
		}
	}
	pctx, cancel := context.WithTimeout(ctx, mediatedProbeTime)
	defer cancel()
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}
	scope := strings.Join(p.c.signIn["mediated"], " ")
	start := time.Now()
	var last *reply
	for i := 1; i <= MediatedAttempts; i++ {
		sent := map[string]string{}
		for _, f := range fs {
			v := creds[f.name]
			if f.secret {
				v = madeUpValue(f.name, f.label, true)
				p.secret(v)
			}
			sent[f.name] = v
		}
		body := jsonBody(map[string]any{"scope": scope, "credentials": sent})
		r, err := p.resourceRequestRetry(pctx, 0, s, http.MethodPost, ep, body, hdr, "", proofOK, false)
		if err != nil {
			if ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
				p.notObserved(fmt.Sprintf("%d Mediated Sign-In attempts with made-up credentials took over a minute", i), "CO-4.7-06")
			}
			return
		}
		values := make([]string, 0, len(sent))
		for _, v := range sent {
			values = append(values, v)
		}
		// CO-4.7-07
		p.check("CO-4.7-07", !echoes(r, values), r.ex, "the answer to a Mediated Sign-In with made-up credentials holds none of them (looked for in its headers, its body and its JSON as decoded)")
		if r.status == http.StatusTooManyRequests {
			ra := r.get("Retry-After")
			d, ok := parseRetryAfter(ra, p.clock.Now())
			p.check("CO-4.7-06", ok && d > 0, r.ex, "Mediated Sign-In attempt %d of %d with made-up credentials, %s after the first, answered 429 with Retry-After %q (%s)",
				i, MediatedAttempts, time.Since(start).Round(time.Millisecond), ra, d)
			return
		}
		var ans map[string]any
		_ = json.Unmarshal(r.body, &ans)
		p.secretsOf(ans)
		st, _ := ans["status"].(string)
		_, access := ans["access_token"]
		_, account := ans["refresh_token"]
		switch {
		case r.status == http.StatusOK && st == "failed":
			p.check("CO-4.7-09", !access && !account, r.ex, "a Mediated Sign-In with made-up credentials failed without a token")
			last = r
			continue
		case st == "complete" || access || account:
			p.fail("CO-4.7-09", r.ex, "a Mediated Sign-In with made-up credentials, which name no account, answered %d %q with a token", r.status, st)
		default:
			p.note("a Mediated Sign-In with made-up credentials answered %d, status %q, error %q", r.status, st, errorCode(r.body))
		}
		p.notObserved(fmt.Sprintf("Mediated Sign-In attempt %d with made-up credentials answered %d %q, not failed or 429; the check stops there", i, r.status, st), "CO-4.7-06")
		return
	}
	if took := time.Since(start); took > mediatedProbeTime {
		p.notObserved(fmt.Sprintf("%d Mediated Sign-In attempts with made-up credentials took %s, over a minute", MediatedAttempts, took.Round(time.Second)), "CO-4.7-06")
		return
	}
	p.fail("CO-4.7-06", last.ex, "%d Mediated Sign-In attempts with made-up credentials within %s each answered failed: none was refused with 429 and Retry-After",
		MediatedAttempts, time.Since(start).Round(time.Millisecond))
}

// opsReads bounds the reads of a confirmed operation that is in_progress;
// opsWait bounds each wait between them.
const (
	opsReads = 2
	opsWait  = 10 * time.Second
)

// operation proposes Options.Propose with the signed-in Session of in,
// sends the same request again and wants the same operation back
// (CO-OPS4-01; another one is cancelled), asks the person to approve it, confirms it and reads it while it is
// in_progress (at most opsReads times, after Retry-After or, without one,
// after 1 s then 2 s), checking Retry-After on every in_progress answer
// (CO-OPS6-01). A declined operation is cancelled (operations section 7).
func (p *prober) operation(ctx context.Context, in signedIn) {
	pr := p.opts.Propose
	if pr == nil {
		return // the catalog's reason
	}
	const rule = "CO-OPS6-01"
	ap, ok := p.opts.Person.(Approver)
	if !ok {
		p.notObserved("Options.Propose was given, but the Person doesn't implement Approver, so the check can't ask for approval", rule)
		return
	}
	m, _ := p.c.exts["operations"].(map[string]any)
	ep, _ := m["endpoint"].(string)
	if ok, _ := p.okURL(ep); !ok {
		p.notObserved("the Company lists no operations endpoint an agent can use", rule)
		return
	}
	if ok, _ := p.okURL(pr.URL); !ok || pr.Method == "" {
		p.notObserved("Options.Propose needs a method and an https URL", rule)
		return
	}
	p.step = "operation"
	hdr := http.Header{"Accept": {"application/json"}}
	if len(pr.Body) > 0 {
		hdr.Set("Content-Type", "application/json")
	}
	r, err := p.resourceRequest(ctx, in.s, strings.ToUpper(pr.Method), pr.URL, pr.Body, hdr, "", proofOK)
	if err != nil {
		return
	}
	var proposed struct {
		Operation struct {
			ID       string  `json:"operation_id"`
			Revision float64 `json:"revision"`
			State    string  `json:"state"`
			Summary  string  `json:"summary"`
		} `json:"operation"`
	}
	_ = json.Unmarshal(r.body, &proposed)
	op := proposed.Operation
	if r.status != http.StatusAccepted || !idRE.MatchString(op.ID) || op.State != "proposed" || op.Revision < 1 {
		p.note("Options.Propose answered %d, operation %q in state %q: nothing to confirm", r.status, op.ID, op.State)
		p.notObserved("the request of Options.Propose proposed no operation", rule)
		return
	}
	// CO-OPS4-01 (OPS 4): the same action asked again while its operation
	// is open is that operation, not a second one. The request goes again
	// as it was, with no Idempotency-Key, as a person asking twice would.
	again, err := p.resourceRequest(ctx, in.s, strings.ToUpper(pr.Method), pr.URL, pr.Body, hdr, "", proofOK)
	if err != nil {
		return
	}
	var second struct {
		Operation struct {
			ID string `json:"operation_id"`
		} `json:"operation"`
	}
	_ = json.Unmarshal(again.body, &second)
	dup := ""
	switch id := second.Operation.ID; {
	case again.status == http.StatusAccepted && id == op.ID:
		p.check("CO-OPS4-01", true, again.ex, "the same action asked again answered the open operation %s", op.ID)
	case again.status == http.StatusAccepted && idRE.MatchString(id):
		p.check("CO-OPS4-01", false, again.ex, "the same action asked again while %s was open proposed another operation, %s", op.ID, id)
		dup = id
	default:
		p.note("the same action asked again answered %d, operation %q", again.status, second.Operation.ID)
		p.notObserved("the request of Options.Propose, sent again, proposed nothing", "CO-OPS4-01")
	}
	token := in.s.token
	if res, _ := m["resource"].(string); res != "" {
		t, ok := p.resourceToken(ctx, in.s, res, "CO-OPS2-02")
		if !ok {
			return
		}
		token = t
	}
	jsonHdr := http.Header{"Accept": {"application/json"}, "Content-Type": {"application/json"}}
	if dup != "" { // the second operation is the check's doing: cancel it (operations section 7)
		_, _ = p.resourceRequest(ctx, in.s, http.MethodPost, strings.TrimSuffix(ep, "/")+"/"+dup+"/cancel", []byte("{}"), jsonHdr, token, proofOK)
	}
	org, _ := p.c.doc["organization"].(map[string]any)
	name, _ := org["name"].(string)
	opURL := strings.TrimSuffix(ep, "/") + "/" + op.ID
	yes, err := ap.Approve(ctx, Approval{Company: name, OperationID: op.ID, Revision: int(op.Revision), Summary: op.Summary})
	if err != nil || !yes {
		_, _ = p.resourceRequest(ctx, in.s, http.MethodPost, opURL+"/cancel", []byte("{}"), jsonHdr, token, proofOK)
		p.notObserved("the person didn't approve the proposed operation; the check cancelled it", rule)
		return
	}
	r, err = p.resourceRequest(ctx, in.s, http.MethodPost, opURL+"/confirm",
		jsonBody(map[string]any{"revision": int(op.Revision), "approved_by": "user"}), jsonHdr, token, proofOK)
	seen := 0
	for read := 0; err == nil; read++ {
		var cur struct {
			State string `json:"state"`
		}
		_ = json.Unmarshal(r.body, &cur)
		if r.status != http.StatusOK || cur.State != "in_progress" {
			if seen == 0 {
				p.notObserved(fmt.Sprintf("the confirmed operation answered %d, state %q: no in_progress answer to see", r.status, cur.State), rule)
			}
			return
		}
		seen++
		what := "the confirm"
		if read > 0 {
			what = "a read"
		}
		ra := r.get("Retry-After")
		d, ok := parseRetryAfter(ra, p.clock.Now())
		p.check(rule, ok, r.ex, "%s answered in_progress with Retry-After %q", what, ra)
		if read == opsReads {
			p.note("the confirmed operation %s was still in_progress after %d reads", op.ID, opsReads)
			return
		}
		if !ok {
			d = time.Second << read // bounded default backoff (PA-OPS6-02)
		}
		d = min(max(d, time.Second), opsWait)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		r, err = p.resourceRequest(ctx, in.s, http.MethodGet, opURL, nil, hdr, token, proofOK)
	}
}
