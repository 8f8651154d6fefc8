package poppytest

// The page at an operation's url (OPS 3: "a page on the Company's website
// that shows this operation in the same Session", spec 5), and the
// website's confirm and cancel (OPS 4.4). The page shows the operation to
// the Session the browser's cookie names when that Session may use it at
// the operations endpoint (OPS 3.2: the Session that received it, or a
// Session of the same client and User signed in to its account); to anyone
// else it is a 404, as at the endpoint.
//
// While the operation is proposed, the page has a confirm form (POST
// /operations/{id}/confirm with the revision it shows, and approved_by
// "user" unless the form says "standing_permission") and a cancel form
// (POST /operations/{id}/cancel). They are the same operation as at the
// endpoint: a website confirm goes through the endpoint's confirmLocked
// under the same lock, with the same checks in the same order (ownership,
// the action's scopes on the Session the cookie names, then an operation
// no longer proposed left as it is, then the revision, then approved_by),
// so confirming on the website and at the endpoint, however often, can't
// perform it twice (CO-OPS6-02). A confirm or cancel the website accepts,
// or finds already done, answers 303 to the page, which shows the state;
// a revision that isn't the latest is 409 (the page of the current
// revision), a standing permission where the User's own approval is
// required 403. Tests read OperationInfo.WebsiteConfirms, WebsiteCancels
// and ConfirmedVia.

import (
	"fmt"
	"html"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// operationPagePrefix is the path of operation pages: /operations/{id}.
const operationPagePrefix = "/operations/"

// webOwns reports whether the Session of v may use op (OPS 3.2, as mayUse
// at the endpoint).
func webOwns(op *fakeOp, v webView) bool {
	return op != nil && v.sessionID != "" && op.clientID == v.clientID && op.sub == v.sub &&
		(op.sessionID == v.sessionID || op.account != "" && v.signedIn && v.account == op.account)
}

func (s *Server) serveOperationPage(w http.ResponseWriter, r *http.Request, v webView) {
	id := strings.TrimPrefix(r.URL.Path, operationPagePrefix)
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	op := st.ops[id]
	var m map[string]any
	if webOwns(op, v) {
		s.progressLocked(op, now)
		m = s.opMapLocked(op)
	}
	st.mu.Unlock()
	if m == nil {
		exchangeOf(r).errorCode = "operation_not_found"
		writePage(w, http.StatusNotFound, "Operation", `<p class="error">No such operation in this Session.</p>`+s.stateBlock(v))
		return
	}
	writePage(w, http.StatusOK, "Operation", s.operationBlock(id, m)+s.stateBlock(v))
}

// operationBlock renders the operation m and, while it is proposed, its
// confirm and cancel forms.
func (s *Server) operationBlock(id string, m map[string]any) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<p id="operation">Operation %s</p><p id="summary">%s</p><p id="op-state">State: %s, revision %v</p>`,
		html.EscapeString(id), html.EscapeString(fmt.Sprint(m["summary"])), html.EscapeString(fmt.Sprint(m["state"])), m["revision"])
	if res, ok := m["result"].(map[string]any); ok {
		fmt.Fprintf(&b, `<p id="result">%s</p>`, html.EscapeString(fmt.Sprint(res["summary"])))
	}
	if m["state"] == "proposed" {
		action := operationPagePrefix + html.EscapeString(id)
		fmt.Fprintf(&b, `<form id="confirm-form" method="post" action="%s/confirm">`+
			`<input type="hidden" name="revision" value="%v"><input type="hidden" name="approved_by" value="user">`+
			`<button id="confirm" type="submit">Confirm revision %v</button></form>`, action, m["revision"], m["revision"])
		fmt.Fprintf(&b, `<form id="cancel-form" method="post" action="%s/cancel"><button id="cancel" type="submit">Cancel</button></form>`, action)
	}
	return b.String()
}

// serveOperationForm answers POST /operations/{id}/confirm and
// /operations/{id}/cancel (OPS 4.4).
func (s *Server) serveOperationForm(w http.ResponseWriter, r *http.Request, v webView) {
	x := exchangeOf(r)
	id, verb, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, operationPagePrefix), "/")
	if verb != "confirm" && verb != "cancel" {
		w.Header().Set("Allow", "GET, HEAD")
		writePage(w, http.StatusMethodNotAllowed, "Not allowed", `<p class="error">method not allowed</p>`)
		return
	}
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	op := st.ops[id]
	owned := webOwns(op, v)
	var scopes []string
	if owned {
		op.counts["website_"+verb]++
		scopes = slices.Clone(op.scopes)
	}
	st.mu.Unlock()
	if !owned {
		x.errorCode = "operation_not_found"
		writePage(w, http.StatusNotFound, "Operation", `<p class="error">No such operation in this Session.</p>`+s.stateBlock(v))
		return
	}
	page := operationPagePrefix + id
	if verb == "cancel" {
		s.cancelOp(op, now) // CO-OPS7-01..03, as at the endpoint
		w.Header().Set("Location", page)
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	// CO-OPS5-02 on the website (CO-5-18): the Session's own scopes.
	if len(scopes) > 0 {
		switch {
		case !v.signedIn:
			x.errorCode = "sign_in_required"
			writePage(w, http.StatusUnauthorized, "Operation", `<p class="error">the Session is not signed in</p>`+s.stateBlock(v))
			return
		case slices.ContainsFunc(scopes, func(sc string) bool { return !slices.Contains(v.scopes, sc) }):
			x.errorCode = "insufficient_scope"
			writePage(w, http.StatusForbidden, "Operation", `<p class="error">the Session lacks the scopes `+html.EscapeString(strings.Join(scopes, " "))+`</p>`+s.stateBlock(v))
			return
		}
	}
	rev, err := strconv.Atoi(x.form.Get("revision"))
	by := x.form.Get("approved_by")
	if by == "" {
		by = "user"
	}
	if x.form == nil || err != nil || rev < 1 || by != "user" && by != "standing_permission" {
		x.errorCode = "invalid_request"
		writePage(w, http.StatusBadRequest, "Operation", `<p class="error">the form needs a revision and approved_by "user" or "standing_permission"</p>`)
		return
	}
	st.mu.Lock()
	code := s.confirmLocked(op, rev, by, "website", now)
	m := s.opMapLocked(op)
	st.mu.Unlock()
	switch code {
	case "terms_changed":
		x.errorCode = code
		writePage(w, http.StatusConflict, "Operation", `<p class="error">The terms changed: approve the current revision.</p>`+s.operationBlock(id, m)+s.stateBlock(v))
	case "user_approval_required":
		x.errorCode = code
		writePage(w, http.StatusForbidden, "Operation", `<p class="error">This operation needs the User's approval of this revision.</p>`+s.operationBlock(id, m)+s.stateBlock(v))
	default:
		w.Header().Set("Location", page)
		w.WriteHeader(http.StatusSeeOther)
	}
}
