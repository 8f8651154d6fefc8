package poppytest

// Device Sign-In (spec 4.6, RFC 8628): the device authorization endpoint,
// the verification page, and the device_code grant.
//
// The verification page shows a consent page for a user_code; only its
// POST, sent by Browse with the programmable User's decision, approves or
// declines (CO-4.6-02). A poll is answered, in this order: expired_token
// once expires_in has passed (CO-4.6-05); invalid_grant once the code was
// exchanged; the next scripted answer (HoldDevicePolls,
// ScriptDevicePolls); slow_down, adding 5 s to the request's interval,
// when a poll comes sooner than interval after the previous one and the
// User hasn't decided (CO-4.6-03, A-14); authorization_pending while the
// User hasn't decided; access_denied after a decline (CO-4.6-04); the
// tokens after an approval. A poll naming a Session that has ended or
// belongs to another client gets invalid_session and leaves the request
// as it is (CO-4.6-06, A-14).

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// deviceRequest is a Device Sign-In request.
type deviceRequest struct {
	deviceCode, userCode          string
	clientID, clientName, logoURI string
	scopes                        []string
	resources                     []string // RFC 8707, as named
	expires                       time.Time
	interval                      time.Duration
	lastPoll                      time.Time
	state                         deviceState
	account                       string
	granted                       []string
	lastSlowDown                  bool   // the previous answer was slow_down
	terminal                      string // access_denied or expired_token, once answered
}

type deviceState int

const (
	devicePending deviceState = iota
	deviceApproved
	deviceDenied
	deviceExchanged
)

// The poll answers ScriptDevicePolls takes (RFC 8628 section 3.5).
const (
	pollPending  = "authorization_pending"
	pollSlowDown = "slow_down"
)

// HoldDevicePolls makes the next n polls of Device Sign-In requests
// answer authorization_pending, whatever the User decided (the User is
// slow to finish), e.g. three pendings, then the approval (PA-4.6-06).
// It adds to the queue of ScriptDevicePolls.
func (k *SignIn) HoldDevicePolls(n int) {
	for range n {
		k.ScriptDevicePolls(pollPending)
	}
}

// ScriptDevicePolls queues the answers of the next polls of Device
// Sign-In requests, whatever the User decided: "authorization_pending" or
// "slow_down" (which also adds 5 s to the polled request's interval,
// PA-4.6-07). An expired request answers expired_token regardless. Any
// other answer panics.
func (k *SignIn) ScriptDevicePolls(answers ...string) {
	s := k.s
	for _, a := range answers {
		if a != pollPending && a != pollSlowDown {
			panic("poppytest: ScriptDevicePolls: unknown answer " + a)
		}
	}
	s.mu.Lock()
	s.signin.script = append(s.signin.script, answers...)
	s.mu.Unlock()
}

// serveDeviceAuthorization handles POST device_authorization_endpoint
// (spec 4.6 step 1, RFC 8628 3.1-3.2): client authentication, no DPoP
// proof (A-06: one is ignored).
func (s *Server) serveDeviceAuthorization(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if !s.signInOffered("device") {
		s.notFound(w, r)
		return
	}
	if !s.requireFormPOST(w, r, "device authorization endpoint") {
		return
	}
	client, perr := s.authenticateClient(r, x.form, s.deviceAuthorizationEndpoint())
	if perr != nil {
		s.writeTokenError(w, r, perr)
		return
	}
	scopes, desc, malformed := s.parseScope("device", x.form.Get("scope"))
	if desc != "" {
		if malformed {
			s.violate(x.idx, "PA-4.4-06", "scope is not single-space separated scope tokens")
		}
		s.writeTokenError(w, r, &protoError{code: "invalid_scope", desc: desc}) // CO-4.4-07..09
		return
	}
	for _, res := range x.form["resource"] {
		if !s.knownResource(res) {
			s.writeTokenError(w, r, &protoError{code: "invalid_target", desc: "unknown resource"}) // RFC 8707 section 2
			return
		}
	}
	name, _ := str(client.metadata, "client_name")
	logo, _ := str(client.metadata, "logo_uri")
	now := s.clock.Now()
	d := &deviceRequest{deviceCode: newID("", 32), clientID: client.id, clientName: name, logoURI: logo,
		scopes: scopes, resources: slices.Clone(x.form["resource"]), expires: now.Add(s.opts.SignIn.DeviceCodeTTL), interval: s.opts.SignIn.DeviceInterval}
	s.mu.Lock()
	for d.userCode == "" || s.signin.userCodes[d.userCode] != nil {
		d.userCode = newUserCode()
	}
	s.signin.devices[d.deviceCode] = d
	s.signin.userCodes[d.userCode] = d
	s.mu.Unlock()
	resp := map[string]any{
		"device_code":               d.deviceCode,
		"user_code":                 d.userCode,
		"verification_uri":          s.verificationURI(),
		"verification_uri_complete": s.verificationURI() + "?user_code=" + d.userCode,
		"expires_in":                int(s.opts.SignIn.DeviceCodeTTL / time.Second),
	}
	if !s.opts.SignIn.OmitInterval {
		resp["interval"] = int(s.opts.SignIn.DeviceInterval / time.Second)
	}
	w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(w, r, http.StatusOK, resp)
}

// newUserCode returns a code like "WDJB-MJHT" from the RFC 8628 6.1
// alphabet of consonants.
func newUserCode() string {
	const alphabet = "BCDFGHJKLMNPQRSTVWXZ"
	b := make([]byte, 8)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:4]) + "-" + string(b[4:])
}

// normalizeUserCode accepts a user_code as a User might type it.
func normalizeUserCode(c string) string {
	c = strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(c))
	if len(c) != 8 {
		return c
	}
	return c[:4] + "-" + c[4:]
}

// serveVerification handles verification_uri (spec 4.6 step 2).
func (s *Server) serveVerification(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if !s.signInOffered("device") {
		s.notFound(w, r)
		return
	}
	s.checkBrowser(r, "the device verification page")
	bad := func(msg string) {
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Device sign-in", msg)
	}
	now := s.clock.Now()
	lookup := func(code string) (*deviceRequest, deviceRequest, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		d := s.signin.userCodes[normalizeUserCode(code)]
		if d == nil || d.state != devicePending || !now.Before(d.expires) {
			return nil, deviceRequest{}, false
		}
		return d, *d, true
	}
	switch r.Method {
	case http.MethodGet:
		code := r.URL.Query().Get("user_code")
		if code == "" {
			s.writeHTML(w, r, http.StatusOK, "Device sign-in",
				`<form method="get"><label>Code <input name="user_code"></label><button>Continue</button></form>`+"\n")
			return
		}
		_, d, ok := lookup(code)
		if !ok {
			bad("this code is unknown, has expired or was already used")
			return
		}
		// CO-4.6-01, CO-4.6-02: the page shows the request; opening it decides nothing.
		s.writeConsentPage(w, r, "user_code", d.userCode, ConsentRequest{Type: "device", ClientID: d.clientID,
			ClientName: d.clientName, LogoURI: d.logoURI, Scopes: d.scopes, UserCode: d.userCode})
	case http.MethodPost:
		if x.form == nil {
			bad("the consent form is form-encoded")
			return
		}
		d, dc, ok := lookup(x.form.Get("user_code"))
		if !ok {
			bad("this code is unknown, has expired or was already used")
			return
		}
		decision, account := x.form.Get("decision"), s.formAccount(x.form)
		switch {
		case decision == "approve" && s.account(account) == nil:
			bad("unknown account")
			return
		case decision != "approve" && decision != "deny":
			bad("decision must be approve or deny")
			return
		}
		granted := intersect(formScopes(x.form), dc.scopes)
		s.mu.Lock()
		if d.state == devicePending {
			if decision == "approve" && len(granted) > 0 {
				d.state, d.account, d.granted = deviceApproved, account, granted
			} else {
				d.state = deviceDenied
			}
		}
		s.mu.Unlock()
		s.writePage(w, r, http.StatusOK, "Device sign-in", "")
	default:
		w.Header().Set("Allow", "GET, POST")
		x.errorCode = "method_not_allowed"
		s.writePage(w, r, http.StatusMethodNotAllowed, "Method not allowed", "")
	}
}

// grantDeviceCode answers a Device Sign-In poll (spec 4.6 step 3, RFC 8628
// 3.4-3.5).
func (s *Server) grantDeviceCode(g *grantRequest) (map[string]any, *protoError) {
	x := g.x
	invalid := func(code, desc string) (map[string]any, *protoError) {
		return nil, &protoError{code: code, desc: desc}
	}
	dc := g.form.Get("device_code")
	if dc == "" {
		return invalid("invalid_request", "device_code is missing")
	}
	sid := g.form.Get("session_id")
	if sid == "" {
		s.violate(x.idx, "PA-4.6-04", "device code poll without session_id")
		return invalid("invalid_request", "session_id is required: it names the Session to sign in (spec 4.6)")
	}
	now := s.clock.Now()
	var violation, vdetail string
	answer, spec, perr := func() (string, *issueSpecT, *protoError) {
		s.mu.Lock()
		defer s.mu.Unlock()
		d := s.signin.devices[dc]
		if d == nil || d.clientID != g.client.id {
			return "", nil, &protoError{code: "invalid_grant", desc: "unknown device_code"}
		}
		sess := s.sessions[sid]
		s.lapseLocked(sess, s.clock.Now())
		if sess == nil || sess.ended || sess.clientID != g.client.id {
			// CO-4.6-06; the request stays as it is.
			return "", nil, &protoError{code: "invalid_session", desc: "the Session has ended or belongs to another Personal Agent"}
		}
		switch d.terminal {
		case "access_denied":
			violation, vdetail = "PA-4.6-09", "polled again after access_denied"
		case "expired_token":
			violation, vdetail = "PA-4.6-10", "polled again after expired_token"
		}
		tooSoon := !d.lastPoll.IsZero() && now.Sub(d.lastPoll) < d.interval
		d.lastPoll = now
		answer := ""
		switch {
		case !now.Before(d.expires):
			answer = "expired_token"
		case d.state == deviceExchanged:
			return "", nil, &protoError{code: "invalid_grant", desc: "the device_code was already exchanged"}
		case len(s.signin.script) > 0:
			answer = s.signin.script[0]
			s.signin.script = s.signin.script[1:]
		case d.state == devicePending && tooSoon:
			answer = pollSlowDown // CO-4.6-03
			if d.lastSlowDown && violation == "" {
				violation, vdetail = "PA-4.6-07", "polled sooner than the interval again after slow_down"
			}
		case d.state == devicePending:
			answer = pollPending
		case d.state == deviceDenied:
			answer = "access_denied" // CO-4.6-04
		}
		d.lastSlowDown = answer == pollSlowDown
		if answer == pollSlowDown {
			d.interval += slowDownStep // RFC 8628 3.5
		}
		if answer == "access_denied" || answer == "expired_token" {
			d.terminal = answer
		}
		if answer != "" {
			return answer, nil, nil
		}
		// Approved.
		if sess.account != "" && sess.account != d.account {
			return "", nil, accountMismatch() // CO-4.4-12; the request stays approved
		}
		spec, perr := s.issueSpec(g, d.granted)
		if perr != nil {
			return "", nil, perr
		}
		d.state = deviceExchanged
		// StrictResourceIndicators: checked after the device code is
		// used up, as oidc-provider does.
		if perr := s.holdToGranted(spec, g, d.resources, true); perr != nil {
			return "", nil, perr
		}
		return "", spec, nil
	}()
	if violation != "" {
		s.violate(x.idx, violation, "%s", vdetail)
	}
	if perr != nil {
		return nil, perr
	}
	if answer != "" {
		return invalid(answer, deviceAnswerDesc(answer))
	}
	s.mu.Lock()
	d := s.signin.devices[dc]
	sess := s.sessions[sid]
	account, granted := d.account, slices.Clone(d.granted)
	s.mu.Unlock()
	_, resp, perr := s.completeSignIn(g, sess, "device", account, granted, spec)
	return resp, perr
}

func deviceAnswerDesc(answer string) string {
	switch answer {
	case pollPending:
		return "the User hasn't finished yet"
	case pollSlowDown:
		return fmt.Sprintf("poll less often: the interval grew by %d s", int(slowDownStep/time.Second))
	case "access_denied":
		return "the User declined"
	case "expired_token":
		return "the device code has expired: start again"
	}
	return ""
}
