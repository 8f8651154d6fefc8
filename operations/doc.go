// Package operations is the Personal Agent side of the Poppy operations
// extension v1: a Company proposes an action as an operation, the User
// approves one revision of its terms, the agent confirms that revision, and
// the Company performs it at most once.
//
// An agent lists the extension in its client metadata
// (poppy.IdentityConfig.Extensions {"operations": "1"}); [New] then gives a
// [Client] for a Session at a Company that lists it. Operations come from
// every channel: [Client.Propose] sends an API request that may answer 202
// (OPS 4.1), [FromToolResult] reads an MCP tool result's structuredContent
// (OPS 4.2), [FromMessage] a conversation message (OPS 4.3), and
// [Client.Observe] makes them one operation per operation_id. Approval
// comes only from the caller's [Approver], or from a standing [Permission]
// the User gave earlier that covers every term; never from Company text.
// An [*Approval] can only be made by [Client.Approve] and can't be changed,
// so code that holds a Client (an LLM tool runtime, say) can't confirm
// anything the User's Approver didn't approve.
// [Client.Handle] runs the whole flow:
//
//	c, _ := operations.New(sess, &operations.Options{Approver: myUI})
//	op, _, _ := c.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"))
//	done, err := c.Handle(ctx, op) // approve, confirm, track to a final state
//	fmt.Println(done.Result.Summary) // the Company's account of what happened
//
// # At most once
//
// [Client.Confirm] writes the approved confirm to the keystore journal
// before the first request, sends it again with the same operation ID when
// it gets no answer, and never asks for a new proposal while the operation
// is open ([Client.Propose] returns the open one with ErrOperationPending).
// After a crash, [Client.Recover] finds the journalled confirms of
// operations that aren't final and finishes them. Standing permissions live
// in the keystore too ([Client.Grant], [Client.Permissions],
// [Client.Revoke]).
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
// why ([Operation.Ambiguity], [ErrAmbiguousTerms]). Amounts compared by
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
//   - A-37 (cancel body): POST {endpoint}/{id}/cancel with Content-Type
//     application/json and the body {}, which a Company reading no body
//     ignores.
//   - A-38 ("the same action"): keyed on the proposing request: method,
//     URL and body. While an operation that request proposed is open,
//     Propose sends nothing and returns it; the key is journalled, so a
//     restart keeps the rule. An MCP tool call is keyed on the server's
//     URL, the tool and its arguments, canonical JSON (ToolCallKey, for
//     ProposeCall). Package api does this for every unsafe OpenAPI call
//     and every MCP tool call given an operations Client, which package
//     llmtools and the poppy command do: a model calling a tool again
//     gets the open operation back, and nothing is sent.
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
