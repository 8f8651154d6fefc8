package poppytest

// The page at an operation's url (OPS 3: "a page on the Company's website
// that shows this operation in the same Session", spec 5). It shows the
// operation to the Session the browser's cookie names when that Session
// may use it at the operations endpoint (OPS 3.2: the Session that
// received it, or a Session of the same client and User signed in to its
// account); to anyone else it is a 404, as at the endpoint. The website
// doesn't confirm or cancel operations: that stays with the endpoint.

import (
	"fmt"
	"html"
	"net/http"
	"strings"
)

// operationPagePrefix is the path of operation pages: /operations/{id}.
const operationPagePrefix = "/operations/"

func (s *Server) serveOperationPage(w http.ResponseWriter, r *http.Request, v webView) {
	id := strings.TrimPrefix(r.URL.Path, operationPagePrefix)
	now := s.clock.Now()
	st := &s.ops
	st.mu.Lock()
	op := st.ops[id]
	var m map[string]any
	if op != nil && v.sessionID != "" && op.clientID == v.clientID && op.sub == v.sub &&
		(op.sessionID == v.sessionID || op.account != "" && v.signedIn && v.account == op.account) {
		s.progressLocked(op, now)
		m = s.opMapLocked(op)
	}
	st.mu.Unlock()
	if m == nil {
		exchangeOf(r).errorCode = "operation_not_found"
		writePage(w, http.StatusNotFound, "Operation", `<p class="error">No such operation in this Session.</p>`+s.stateBlock(v))
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<p id="operation">Operation %s</p><p id="summary">%s</p><p id="op-state">State: %s, revision %v</p>`,
		html.EscapeString(id), html.EscapeString(fmt.Sprint(m["summary"])), html.EscapeString(fmt.Sprint(m["state"])), m["revision"])
	if res, ok := m["result"].(map[string]any); ok {
		fmt.Fprintf(&b, `<p id="result">%s</p>`, html.EscapeString(fmt.Sprint(res["summary"])))
	}
	writePage(w, http.StatusOK, "Operation", b.String()+s.stateBlock(v))
}
