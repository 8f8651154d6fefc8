// Package operations is the Personal Agent side of the Poppy operations
// extension v1: a Company proposes an action as an operation, the User
// approves one revision of its terms, the agent confirms that revision, and
// the Company performs it at most once.
//
// An agent lists the extension in its client metadata
// (poppy.IdentityConfig.Extensions {"operations": "1"}); [New] then gives a
// [Client] for a Session at a Company that lists it. An operation is an
// [*Operation] whichever channel it comes from, one per operation_id in the
// Client's views ([Client.Observe]): [Client.Propose] sends an API request
// that may answer 202 (OPS 4.1); package api, given the Client
// (api.OpenAPIOptions.Operations, api.MCPOptions.Operations), proposes its
// OpenAPI calls and MCP tool calls through it (OPS 4.1, 4.2), and package
// conversation, given it (conversation.Options.Operations), hands it the
// operation of every Company message (OPS 4.3). Approval
// comes only from the caller's [Approver], or from a standing [Permission]
// the User gave earlier that covers every term; never from Company text.
// An [*Approval] can only be made by [Client.Approve] and can't be changed,
// so code that holds a Client (an LLM tool runtime, say) can't confirm
// anything the User's Approver didn't approve.
// [Client.Handle] runs the whole flow:
//
//	c, _ := operations.New(sess, &operations.Options{Approver: myUI})
//	op, _, _ := c.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), nil)
//	done, err := c.Handle(ctx, op, nil) // approve, confirm, track to a final state
//	fmt.Println(done.Result.Summary) // the Company's account of what happened
//
// # At most once
//
// [Client.Confirm] writes the approved confirm to the keystore journal
// before the first request, sends it again with the same operation ID when
// it gets no answer, and never asks for a new proposal while the operation
// is open ([Client.Propose] returns the open one in a [*PendingError]).
// [Client.Propose] journals each proposing request before sending it, with
// the Idempotency-Key it sends; a request whose answer was lost (or whose
// process died before journalling it) is sent again with the same key the
// next time the same request is made, in any process sharing the keystore
// (A-38 below). After a crash, [Client.Recover] finds the journalled
// confirms of operations that aren't final and finishes them. Standing
// permissions live in the keystore too ([Client.Grant],
// [Client.Permissions], [Client.Revoke]). An Approve of an operation that
// another process or channel has confirmed, cancelled or let expire is a
// [*StateError] with its state.
//
// # Confirming on the website
//
// An operation's url shows it on the Company's website in the same Session
// (OPS 4.4), and a website may let the Session confirm it there.
// [Client.Confirm] (or [Client.Handle]) with [ConfirmOptions].Website does
// that with the same [*Approval], so the User's approval of that revision
// comes first however the operation is confirmed (PA-OPS4-04): the caller's [WebsiteConfirmer]
// presses the page's button in a browser joined to the Session (package
// browser), and the SDK reads the operation at the endpoint to learn what
// the Company did. Nothing else in the SDK confirms on a website.
//
// # Reading terms
//
// An operation's terms are read once, by one strict reader, into one tree,
// and that reading is all the SDK uses: a standing [Permission] is checked
// against it, the [Approver] is shown its canonical encoding
// (ApprovalRequest.Terms, the same bytes as Operation.Terms: members in the
// Company's order, strings unescaped, no white space), and the journal
// keeps those bytes. A term's place is a [Path], a sequence of member
// names, never a joined string: Path{"total.amount"} is one member, and
// never total's amount. Terms that two readers could read differently
// have no canonical form and are never covered by a permission: a member
// name twice in one object at any depth, a number token outside the
// decimal grammar, invalid UTF-8, an escaped lone surrogate or U+0000,
// nesting deeper than 64, or two places whose names joined with "." are
// one string ({"total": {"amount": "9999.00"}, "total.amount": "1.00"}).
// They go to the Approver as sent, with ApprovalRequest.Ambiguity saying
// why ([Operation.Ambiguity], [*AmbiguousTermsError]). Amounts compared by
// [AtMost] and [AtLeast] are read in the decimal grammar, as JSON numbers
// or strings: an optional "-", digits without a leading zero, an optional
// fraction ("70.00"); "0x10", "0b101", "0o17", "0x1p4", "1e2" and "070"
// are not decimal numbers, and a term holding one is not covered. A
// permission stored with a path as one dotted string (by an earlier
// version) is read as names split at every ".", so it can never match a
// member whose name holds a dot.
//
// A Client's views keep an operation's url only on an origin the
// Company's documents name (the domain it was resolved from and
// organization.domain, with or without "www.", and the origins of the URLs
// in poppy.json and the OAuth metadata): a url elsewhere is dropped, so it
// is never shown to the User, the Approver or a model as the Company's.
//
// # Decisions on the specification's open points
//
//   - A-34 (the account of a standing permission): the account is the
//     label of the Account Token the Session is signed in with
//     (poppy.SignInOptions.Account, poppy.Session.Account). A Session that
//     is signed out has no account, and no standing permission applies to
//     it. An operation without terms is never covered: "every term" can't
//     be checked by machine.
//   - A-35 (the Company's name): organization.name of the Company the
//     Session is at (poppy.Company.Name), with the domain it was resolved
//     from beside it in ApprovalRequest.Domain.
//   - A-36 (confirm statuses and order): 200 and 202 are both accepted with
//     the operation in the body; any state the confirm answers is taken as
//     it is (a final one is the result, not an error). A proposed operation
//     past expires_at is treated as expired locally: it is never confirmed.
//     expires_at is required while proposed (OPS 3, PA-OPS3-02), and Parse
//     stays lenient (PA-OPS3-01): an operation without one, or with Go's
//     zero time ("0001-01-01T00:00:00Z", which reads as no time), is read
//     and shown, but Approve refuses it with ErrProtocol before a
//     permission or the User is asked, and it is never confirmed; one
//     whose expires_at is not after now is ErrOperationExpired. A
//     terms_changed answer (409) brings the latest revision (OPS 9): one
//     not later than the revision confirmed is stale, the Company's error
//     (PA-OPS3-09), refused with ErrProtocol, and the User is not asked
//     again for the revision already approved.
//   - A-37 (cancel body): POST {endpoint}/{id}/cancel with Content-Type
//     application/json and the body {}, which a Company reading no body
//     ignores.
//   - A-38 ("the same action"): keyed on the proposing request: the
//     method; the URL with its host in lower case and its query parameters
//     sorted by name (one name's values keep their order); and the body,
//     as canonical JSON (members sorted, no insignificant space) when it
//     is JSON of at most 8 MiB, else byte for byte. While an operation that
//     request proposed is open, Propose sends nothing and returns it; the
//     key is journalled, so a restart keeps the rule. An MCP tool call is
//     keyed on the server's URL, the tool and its arguments, canonical JSON
//     (ToolCallKey, for ProposeOptions.CallKey). Package api does this for every
//     unsafe OpenAPI call and every MCP tool call given an operations
//     Client, which package llmtools and the poppy command do: a model
//     calling a tool again gets the open operation back, and nothing is
//     sent. Keys journalled before keys were canonical (method, URL and
//     body byte for byte) are not orphaned: while the journal holds an
//     open operation under such a key, Propose computes that key too and
//     matches either, so the same request, byte for byte, still finds its
//     operation after an upgrade; such records age out with their
//     operations.
//   - Finding the operation of a proposal whose answer was lost (OPS 4,
//     6): the extension has no way to list a Session's operations and
//     names no key for proposals, and a request whose answer was lost may
//     or may not have proposed one. So Propose journals the request's key
//     and an Idempotency-Key (128 random bits, a Structured Field string as
//     draft-ietf-httpapi-idempotency-key-header defines it; or the
//     caller's own header) before sending it with that header. When it
//     gets no answer, a 5xx, or a 202 it can't read (ErrProposalUnanswered),
//     or the process dies first, the record stays, and the same request
//     made again, in any process sharing the keystore, is sent with the
//     same Idempotency-Key: the retry of one proposing request, not a new
//     proposal (PA-OPS6-04). It finds the first operation both at a
//     Company that honours the header and at one that returns the open
//     operation of the same action (the OPS 4 SHOULD) whatever the header;
//     only a Company that does neither proposes a second operation, which
//     performs nothing (a proposal never does) and expires unconfirmed.
//     The SDK never probes for a list endpoint the spec doesn't define.
//     A 2xx without an operation or a refusal (4xx other than 409) ends
//     the record; a 409 keeps it (the draft's answer while the first
//     request with the key is still being processed). A Company that
//     compares the exact bytes under a key may refuse (422) a retry whose
//     JSON members are in another order; the record then ends, and the
//     next request gets a new key. Request bodies are never journalled:
//     Recover can't send a request again, the caller's next identical
//     request does.
//   - A-39 (signed-out proposal, later signed in): the SDK keeps using the
//     Session it was proposed in; journal entries are picked up by the
//     Session with the same name, or by any Session signed in to the
//     account the proposing Session was signed in to.
//   - A-41 (extension_required body): {"error":"extension_required",
//     "extension":"operations"}, read by poppy.ResponseError; the refusal
//     matches poppy.ErrExtensionRequired and poppy.ExtensionRequiredError
//     names the extension.
//
// Other choices: in_progress without Retry-After is read again after 1 s,
// doubling to 30 s; Retry-After is obeyed up to Options.MaxWait (5 min). A
// confirm or cancel that gets no answer or a 5xx is sent up to 8 times,
// then the error says it is journalled. Operations are bounded: 256 KiB in
// all, a 256-byte operation_id, 16 KiB summaries, 64 KiB terms; a url is
// kept only when it is https (and, in a Client's views, on the Company's
// origins). The extension gives no grammar for amounts; the SDK reads
// them in the JSON number grammar without an exponent, at most 40
// characters, which every reader reads as the same number.
package operations
