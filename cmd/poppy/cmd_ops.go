package main

// poppy ops and poppy permissions: the operations extension (OPS). An
// operation proposed through "poppy api" or "poppy mcp call" is remembered
// under the command's own keystore kind (domain, ID and the action that
// proposed it) so that a later process finds it: the SDK journals only
// proposals it sent itself and confirms. "ops show" and "ops confirm" read
// the operation from the Company (Client.Get) in any case, so an ID seen
// elsewhere works too.
//
// One rule for every approval the command asks for (ops confirm, ask):
// approval comes from the User at a terminal, as a typed "yes"; from the
// --approve flag of ops confirm, for the revision it showed; or from a
// standing permission that covers every term. Only a typed "no" declines
// (and the Company is told). No answer (the end of input, answers that are
// neither, or a stdin that is not a terminal, which is never read for an
// answer) leaves the operation proposed, as it was, with exit code 5: a
// script can't approve, nor decline, by what it pipes in.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
)

const kindCLIOperation keystore.Kind = "cli_operation"

// opRecord is what the command remembers of an operation it saw.
type opRecord struct {
	Profile string            `json:"profile"`
	Domain  string            `json:"domain"`
	ID      string            `json:"operation_id"`
	Action  operations.Action `json:"action"`
	State   string            `json:"state"`
	Summary string            `json:"summary"`
	Seen    time.Time         `json:"seen"`
}

func opKey(profile, domain, id string) keystore.Key {
	k, _ := json.Marshal([3]string{profile, domain, id})
	return keystore.Key{Kind: kindCLIOperation, User: cliUser, Issuer: cliIssuer, ID: string(k)}
}

func (a *app) rememberOp(ctx context.Context, domain string, op *operations.Operation, action *operations.Action) {
	err := a.store.Update(ctx, opKey(a.profile, domain, op.ID), func(cur []byte) ([]byte, error) {
		var r opRecord
		_ = json.Unmarshal(cur, &r)
		r.Profile, r.Domain, r.ID, r.State, r.Summary = a.profile, domain, op.ID, string(op.State), op.Summary
		if action != nil {
			r.Action = *action
		}
		if r.Seen.IsZero() {
			r.Seen = time.Now().UTC().Truncate(time.Second)
		}
		return json.Marshal(&r)
	})
	if err != nil {
		a.log.Debug("poppy: remembering the operation", "err", err)
	}
}

func (a *app) recalledOp(ctx context.Context, domain, id string) (opRecord, bool) {
	b, err := a.store.Get(ctx, opKey(a.profile, domain, id))
	var r opRecord
	if err != nil || json.Unmarshal(b, &r) != nil {
		return r, false
	}
	return r, true
}

func (a *app) recalledOps(ctx context.Context, domain string) ([]opRecord, error) {
	keys, err := a.store.List(ctx, kindCLIOperation, cliUser, cliIssuer)
	if err != nil {
		return nil, err
	}
	var out []opRecord
	for _, k := range keys {
		b, err := a.store.Get(ctx, k)
		var r opRecord
		if err != nil || json.Unmarshal(b, &r) != nil || r.Profile != a.profile || r.Domain != domain {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// opsClient returns the operations Client of the Session, asking the User
// through approver (nil: the terminal, as approve does).
func (a *app) opsClient(s *poppy.Session, approver operations.Approver) (*operations.Client, error) {
	if approver == nil {
		approver = operations.ApproverFunc(a.approve)
	}
	c, err := operations.New(s, &operations.Options{Approver: approver, Logger: a.log})
	if errors.Is(err, operations.ErrNotSupported) {
		return nil, &hintError{err: err, code: exitError, hint: "the Company does not offer the operations extension (see: poppy discover DOMAIN)"}
	}
	return c, err
}

// rememberProposed remembers, for ops list, the operation an API answer,
// a tool result or a message carried. The operations Client the call or
// the conversation went through has observed it already (api's
// OpenAPIOptions.Operations and MCPOptions.Operations, conversation's
// Options.Operations), and journalled what it proposed.
func (a *app) rememberProposed(ctx context.Context, domain string, op *operations.Operation, action operations.Action) {
	a.rememberOp(ctx, domain, op, &action)
}

// opView is an operation in --json output: the wire form (OPS 3).
func opJSON(op *operations.Operation) json.RawMessage {
	b, err := op.MarshalJSON()
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// errNoAnswer: the User neither approved nor declined; the operation is
// left as it is (exit code 5). A stdin that is not a terminal, where no
// answer is read, is one too.
var errNoAnswer = operations.ErrNoAnswer

// approve asks the User on the terminal (OPS 5.1) with the SDK's terminal
// approver (operations.TerminalApprover), the one rule for every approval
// the command asks: "yes" approves, "no" declines, anything else is asked
// again; the end of input, or three answers that are neither, is no answer
// (errNoAnswer), and so is a stdin that is not a terminal, which is never
// read. The Company's text is shown through internal/companytext and
// internal/termtext there.
func (a *app) approve(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	return operations.TerminalApprover(a.out.prompt(), a.in).Approve(ctx, req)
}

// flagApprover is the Approver of "ops confirm --approve": the User's
// approval, given on the command line, of the revision the command showed
// when it started. Any other revision (the terms changed) is asked as
// approve asks.
type flagApprover struct {
	a        *app
	id       string
	revision int
}

func (f *flagApprover) Approve(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	if req.OperationID != f.id || req.Revision != f.revision {
		return f.a.approve(ctx, req)
	}
	w := f.a.out.prompt()
	if err := operations.TerminalApprover(w, nil).Show(req); err != nil {
		return operations.Decline, err
	}
	fmt.Fprintf(w, "Approved with --approve (revision %d).\n", req.Revision)
	return operations.Approve, nil
}

// printOp shows an operation: state, summary, terms and result.
func (a *app) printOp(op *operations.Operation) {
	o := a.out
	o.printf("%s %s: %s\n", o.bold("Operation"), esc(op.ID), esc(string(op.State)))
	// One list, so that every label is aligned with the others; the
	// terms, on lines of their own, come last.
	kv := []string{"summary", esc(op.Summary), "revision", fmt.Sprint(op.Revision)}
	if !op.ExpiresAt.IsZero() && op.State == operations.StateProposed {
		kv = append(kv, "expires", op.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
	}
	if op.URL != "" {
		kv = append(kv, "page", esc(op.URL))
	}
	if op.Result != nil {
		kv = append(kv, "result", esc(op.Result.Summary))
	}
	o.kv(kv...)
	if len(op.Terms) > 0 {
		o.printf("terms:\n%s", escLines(prettyBody(op.Terms), "  "))
	}
}

func newCmdOps(a *app) *cobra.Command {
	ops := &cobra.Command{
		Use:   "ops",
		Short: "Review, approve, track and cancel the operations a Company proposed",
		Long: `ops works with operations (the operations extension): actions a Company
proposed that are not done until you approve them.

  ops list DOMAIN        the operations seen through poppy api / mcp call
  ops show DOMAIN ID     the operation as the Company has it now
  ops confirm DOMAIN ID  show the summary and terms, ask you, confirm and track
  ops cancel DOMAIN ID   decline a proposal, or ask to stop one in progress
  ops track DOMAIN ID    wait until the operation is final

confirm asks you on the terminal: only a typed "yes" approves, only a typed
"no" declines (exit code 4). No answer (the end of input, or answers that
are neither) leaves the operation proposed (exit code 5); a stdin that is
not a terminal is never asked, so "yes | poppy ops confirm" approves
nothing. From a script, --approve approves the revision shown. A standing
permission ("poppy permissions") that covers every term approves without
asking.`,
		Example: `  poppy ops list example.com
  poppy ops show example.com exc_123
  poppy ops confirm example.com exc_123
  poppy ops confirm example.com exc_123 --approve
  poppy ops cancel example.com exc_123`,
		GroupID: "apis",
	}
	ops.AddCommand(newCmdOpsList(a, nil), newCmdOpsShow(a, nil), newCmdOpsConfirm(a, nil), newCmdOpsCancel(a, nil), newCmdOpsTrack(a, nil))
	return ops
}

// opOptions is the options of the ops commands that take DOMAIN ID.
type opOptions struct {
	app    *app
	Domain string
	ID     string
}

// opsConfirmOptions is the options of ops confirm.
type opsConfirmOptions struct {
	opOptions
	Approve bool
}

// newOpCmd is an ops command on DOMAIN ID.
func newOpCmd(a *app, opts *opOptions, use, short, example string, run func(context.Context) error) *cobra.Command {
	return &cobra.Command{
		Use: use + " DOMAIN ID", Short: short, Example: example,
		Args: cobra.ExactArgs(2), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain, opts.ID = args[0], args[1]
			return run(cmd.Context())
		},
	}
}

type opsListOptions struct {
	app    *app
	Domain string
}

func newCmdOpsList(a *app, runF func(context.Context, *opsListOptions) error) *cobra.Command {
	opts := &opsListOptions{app: a}
	return &cobra.Command{
		Use: "list DOMAIN", Short: "List the operations seen at the Company",
		Example: `  poppy ops list example.com
  poppy --json ops list example.com`,
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOpsList(cmd.Context(), opts)
		},
	}
}

func runOpsList(ctx context.Context, opts *opsListOptions) error {
	a := opts.app
	c, err := a.company(ctx, opts.Domain)
	if err != nil {
		return err
	}
	recs, err := a.recalledOps(ctx, c.Domain())
	if err != nil {
		return err
	}
	type item struct {
		ID      string            `json:"operation_id"`
		State   string            `json:"state"`
		Summary string            `json:"summary"`
		Action  operations.Action `json:"action"`
		Seen    time.Time         `json:"seen"`
	}
	items := []item{}
	for _, r := range recs {
		items = append(items, item{r.ID, r.State, r.Summary, r.Action, r.Seen})
	}
	a.out.emit(map[string]any{"domain": c.Domain(), "operations": items})
	a.out.printf("%s at %s (as last seen; poppy ops show DOMAIN ID reads one again):\n", a.out.bold("Operations"), esc(c.Name()))
	if len(items) == 0 {
		a.out.printf("  (none)\n")
	}
	for _, it := range items {
		a.out.printf("  %-14s %-11s %s\n", esc(it.ID), esc(it.State), esc(it.Summary))
	}
	return nil
}

func newCmdOpsShow(a *app, runF func(context.Context, *opOptions) error) *cobra.Command {
	opts := &opOptions{app: a}
	return newOpCmd(a, opts, "show", "Show an operation as the Company has it now",
		"  poppy ops show example.com exc_123\n  poppy --json ops show example.com exc_123 | jq .operation.state",
		func(ctx context.Context) error {
			if runF != nil {
				return runF(ctx, opts)
			}
			return runOpsShow(ctx, opts)
		})
}

func runOpsShow(ctx context.Context, opts *opOptions) error {
	a := opts.app
	c, oc, err := a.opsSession(ctx, opts.Domain, nil)
	if err != nil {
		return err
	}
	op, err := a.getOp(ctx, c, oc, opts.Domain, opts.ID)
	if err != nil {
		return err
	}
	a.out.emit(map[string]any{"operation": opJSON(op)})
	a.printOp(op)
	if op.State == operations.StateProposed {
		a.out.printf("\nNot done until you approve it: %s\n", a.cmdline("ops", "confirm", shellQuote(opts.Domain), shellQuote(opts.ID)))
	}
	return nil
}

func newCmdOpsConfirm(a *app, runF func(context.Context, *opsConfirmOptions) error) *cobra.Command {
	opts := &opsConfirmOptions{opOptions: opOptions{app: a}}
	cmd := newOpCmd(a, &opts.opOptions, "confirm", "Ask you to approve the operation, confirm it and track it to its result",
		`  poppy ops confirm example.com exc_123
  poppy --json ops confirm example.com exc_123
  poppy ops confirm example.com exc_123 --approve    # from a script: approve the revision shown`,
		func(ctx context.Context) error {
			if runF != nil {
				return runF(ctx, opts)
			}
			return runOpsConfirm(ctx, opts)
		})
	cmd.Long = `confirm reads the operation from the Company, shows its summary and terms,
and asks you: a typed "yes" approves, a typed "no" declines (the Company is
told; exit code 4). No answer (the end of input, or answers that are
neither) leaves it proposed, as it was (exit code 5). A stdin that is not
a terminal is never read for an answer: from a script, --approve is your
approval of the revision shown (terms that change afterwards are asked on
a terminal, never approved by the flag). A standing permission that
covers every term approves without asking. Once approved, the operation
is confirmed and tracked until it is final.`
	cmd.Flags().BoolVar(&opts.Approve, "approve", false, "approve the operation's current revision without asking (you answer yes on the command line)")
	return cmd
}

func runOpsConfirm(ctx context.Context, opts *opsConfirmOptions) error {
	a := opts.app
	// The Approver needs the revision shown, read below.
	fa := &flagApprover{a: a}
	var approver operations.Approver
	if opts.Approve {
		approver = fa
	}
	c, oc, err := a.opsSession(ctx, opts.Domain, approver)
	if err != nil {
		return err
	}
	op, err := a.getOp(ctx, c, oc, opts.Domain, opts.ID)
	if err != nil {
		return err
	}
	if op.State != operations.StateProposed {
		op, err = oc.Track(ctx, op.ID)
		return a.finalOp(ctx, c, opts.Domain, op, err)
	}
	fa.id, fa.revision = op.ID, op.Revision
	done, err := oc.Handle(ctx, op, nil)
	return a.finalOp(ctx, c, opts.Domain, done, err)
}

func newCmdOpsCancel(a *app, runF func(context.Context, *opOptions) error) *cobra.Command {
	opts := &opOptions{app: a}
	return newOpCmd(a, opts, "cancel", "Decline a proposed operation, or ask the Company to stop it",
		"  poppy ops cancel example.com exc_123",
		func(ctx context.Context) error {
			if runF != nil {
				return runF(ctx, opts)
			}
			return runOpsCancel(ctx, opts)
		})
}

func runOpsCancel(ctx context.Context, opts *opOptions) error {
	a := opts.app
	c, oc, err := a.opsSession(ctx, opts.Domain, nil)
	if err != nil {
		return err
	}
	op, err := oc.Cancel(ctx, opts.ID)
	return a.finalOp(ctx, c, opts.Domain, op, err)
}

func newCmdOpsTrack(a *app, runF func(context.Context, *opOptions) error) *cobra.Command {
	opts := &opOptions{app: a}
	return newOpCmd(a, opts, "track", "Wait until the operation is final and show its result",
		"  poppy ops track example.com exc_123\n  poppy --json ops track example.com exc_123",
		func(ctx context.Context) error {
			if runF != nil {
				return runF(ctx, opts)
			}
			return runOpsTrack(ctx, opts)
		})
}

func runOpsTrack(ctx context.Context, opts *opOptions) error {
	a := opts.app
	c, oc, err := a.opsSession(ctx, opts.Domain, nil)
	if err != nil {
		return err
	}
	if _, err := a.getOp(ctx, c, oc, opts.Domain, opts.ID); err != nil {
		return err
	}
	op, err := oc.Track(ctx, opts.ID)
	return a.finalOp(ctx, c, opts.Domain, op, err)
}

// opsSession resolves domain and returns its operations Client.
func (a *app) opsSession(ctx context.Context, domain string, approver operations.Approver) (*poppy.Company, *operations.Client, error) {
	c, s, err := a.session(ctx, domain)
	if err != nil {
		return nil, nil, err
	}
	oc, err := a.opsClient(s, approver)
	if err != nil {
		return nil, nil, err
	}
	return c, oc, nil
}

// getOp reads the operation from the Company, observed with the action
// that proposed it when this keystore remembers one.
func (a *app) getOp(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) (*operations.Operation, error) {
	op, err := oc.Get(ctx, id)
	if err != nil {
		return nil, a.apiError(err, c, domain, nil)
	}
	if r, ok := a.recalledOp(ctx, c.Domain(), id); ok && r.Action.Channel != "" {
		if v, err := oc.Observe(op, r.Action); err == nil {
			op = v
		}
	}
	a.rememberOp(ctx, c.Domain(), op, nil)
	return op, nil
}

// finalOp shows how confirm, cancel or track ended.
func (a *app) finalOp(ctx context.Context, c *poppy.Company, domain string, op *operations.Operation, err error) error {
	if op != nil {
		a.rememberOp(ctx, c.Domain(), op, nil)
		if err == nil {
			a.out.emit(map[string]any{"operation": opJSON(op)})
		}
		a.printOp(op)
	}
	if err != nil {
		return a.opsError(err, c, domain, op)
	}
	if op != nil && (op.State == operations.StateFailed || op.State == operations.StateExpired) {
		return fmt.Errorf("poppy: the operation %s", op.State)
	}
	return nil
}

// opsError says what to do after a failed confirm, cancel or track.
func (a *app) opsError(err error, c *poppy.Company, domain string, op *operations.Operation) error {
	switch {
	case errors.Is(err, errNoAnswer):
		confirm := a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(opID(op)))
		return &hintError{err: err, code: exitNoAnswer,
			hint: "nothing was approved or declined; the operation stays proposed" + until(op) +
				". Answer on a terminal: " + confirm + " (from a script, add --approve to approve it)"}
	case errors.Is(err, operations.ErrDeclined):
		return &hintError{err: err, code: exitDeclined, hint: "you declined; the Company was told, and nothing was done"}
	case errors.Is(err, operations.ErrOperationExpired):
		return &hintError{err: err, code: exitError, hint: "ask the Company again for a new proposal (the same poppy api or mcp call)"}
	}
	return a.apiError(err, c, domain, nil)
}

// until says until when op can be approved, if it says.
func until(op *operations.Operation) string {
	if op == nil || op.ExpiresAt.IsZero() {
		return ""
	}
	return " until " + op.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST")
}

func opID(op *operations.Operation) string {
	if op == nil {
		return "ID"
	}
	return op.ID
}

func newCmdPermissions(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "permissions",
		Short: "Grant, list and revoke standing permissions for operations",
		Long: `permissions manages standing permissions: your approval, given ahead of
time, of operations of one action at one Company whose every term stays
within the limits you set. They are kept in the keystore and apply only
while you are signed in to the same account.`,
		Example: `  poppy permissions grant example.com --action 'openapi:POST /orders/{id}/exchanges' --any order_id --at-most price_difference.amount=100
  poppy permissions list example.com
  poppy permissions revoke example.com perm_123`,
		GroupID: "apis",
	}
	cmd.AddCommand(newCmdPermissionsGrant(a, nil), newCmdPermissionsList(a, nil), newCmdPermissionsRevoke(a, nil))
	return cmd
}

type permissionsGrantOptions struct {
	app         *app
	Domain      string
	Action      string
	Any         []string
	Eq          []string
	AtMost      []string
	AtLeast     []string
	For         time.Duration
	Description string
}

func newCmdPermissionsGrant(a *app, runF func(context.Context, *permissionsGrantOptions) error) *cobra.Command {
	opts := &permissionsGrantOptions{app: a}
	cmd := &cobra.Command{
		Use:   "grant DOMAIN --action ACTION [--at-most PATH=N] [--eq PATH=JSON] [--any PATH]...",
		Short: "Approve ahead of time the operations of one action within limits",
		Long: `grant stores a standing permission. --action is "openapi:METHOD /path/{template}",
"mcp:TOOL" or "conversation". Every term of an operation must be covered:
--any PATH (any value), --eq PATH=JSON, --at-most PATH=N, --at-least PATH=N;
PATH joins nested keys with ".", or is a JSON Pointer ("/total.amount") for
a key that holds a dot. --for sets how long it lasts.`,
		Example: `  poppy permissions grant example.com --action 'openapi:POST /orders/{id}/exchanges' \
      --any order_id --any item_id --any replacement_sku --at-most price_difference.amount=100 --for 2h
  poppy permissions grant example.com --action mcp:save_size_profile --any height_cm --any chest_cm`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runPermissionsGrant(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Action, "action", "", `the action: "openapi:METHOD /path", "mcp:TOOL" or "conversation"`)
	cmd.Flags().StringArrayVar(&opts.Any, "any", nil, "cover the term at PATH with any value (repeatable)")
	cmd.Flags().StringArrayVar(&opts.Eq, "eq", nil, "cover the term at PATH when it equals the JSON value: PATH=JSON (repeatable)")
	cmd.Flags().StringArrayVar(&opts.AtMost, "at-most", nil, "cover the number at PATH up to N: PATH=N (repeatable)")
	cmd.Flags().StringArrayVar(&opts.AtLeast, "at-least", nil, "cover the number at PATH from N: PATH=N (repeatable)")
	cmd.Flags().DurationVar(&opts.For, "for", 24*time.Hour, "how long the permission lasts")
	cmd.Flags().StringVar(&opts.Description, "description", "", "your own words, shown when listing")
	return cmd
}

func runPermissionsGrant(ctx context.Context, opts *permissionsGrantOptions) error {
	a := opts.app
	act, err := parseAction(opts.Action)
	if err != nil {
		return err
	}
	var terms []operations.Term
	for _, s := range opts.Any {
		p, err := operations.ParsePath(s)
		if err != nil {
			return usageError{err: err}
		}
		terms = append(terms, operations.AnyValue(p))
	}
	for _, kv := range opts.Eq {
		s, v, ok := strings.Cut(kv, "=")
		p, err := operations.ParsePath(s)
		if !ok || err != nil || !json.Valid([]byte(v)) {
			return usageError{err: fmt.Errorf("poppy: --eq %q: want PATH=JSON", kv)}
		}
		terms = append(terms, operations.Term{Path: p, Op: operations.OpEqual, Values: []json.RawMessage{json.RawMessage(v)}})
	}
	for _, kv := range opts.AtMost {
		s, v, ok := strings.Cut(kv, "=")
		p, err := operations.ParsePath(s)
		if !ok || err != nil {
			return usageError{err: fmt.Errorf("poppy: --at-most %q: want PATH=N", kv)}
		}
		terms = append(terms, operations.AtMost(p, v))
	}
	for _, kv := range opts.AtLeast {
		s, v, ok := strings.Cut(kv, "=")
		p, err := operations.ParsePath(s)
		if !ok || err != nil {
			return usageError{err: fmt.Errorf("poppy: --at-least %q: want PATH=N", kv)}
		}
		terms = append(terms, operations.AtLeast(p, v))
	}
	if len(terms) == 0 {
		return usageError{err: errors.New("poppy: a standing permission needs at least one term (--any, --eq, --at-most, --at-least)")}
	}
	c, s, err := a.session(ctx, opts.Domain)
	if err != nil {
		return err
	}
	if s.Account() == "" {
		return a.signInHint(errors.New("poppy: a standing permission applies to a signed-in account, and this Session is signed out"), c, opts.Domain, nil)
	}
	oc, err := a.opsClient(s, nil)
	if err != nil {
		return err
	}
	p, err := oc.Grant(ctx, operations.Permission{Account: s.Account(), Action: act, Terms: terms, Expires: time.Now().Add(opts.For), Description: opts.Description})
	if err != nil {
		return usageError{err: err}
	}
	a.out.emit(map[string]any{"permission": p})
	a.out.printf("%s %s for %s at %s, until %s\n", a.out.green("Granted"), esc(p.ID), esc(actionFlag(act)), esc(c.Name()), p.Expires.Local().Format(time.RFC3339))
	return nil
}

type permissionsListOptions struct {
	app    *app
	Domain string
}

func newCmdPermissionsList(a *app, runF func(context.Context, *permissionsListOptions) error) *cobra.Command {
	opts := &permissionsListOptions{app: a}
	return &cobra.Command{
		Use: "list DOMAIN", Short: "List your standing permissions at the Company",
		Example: `  poppy permissions list example.com
  poppy --json permissions list example.com`,
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runPermissionsList(cmd.Context(), opts)
		},
	}
}

func runPermissionsList(ctx context.Context, opts *permissionsListOptions) error {
	a := opts.app
	c, oc, err := a.opsSession(ctx, opts.Domain, nil)
	if err != nil {
		return err
	}
	ps, err := oc.Permissions(ctx)
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []operations.Permission{}
	}
	a.out.emit(map[string]any{"domain": c.Domain(), "permissions": ps})
	a.out.printf("%s at %s:\n", a.out.bold("Standing permissions"), esc(c.Name()))
	if len(ps) == 0 {
		a.out.printf("  (none)\n")
	}
	for _, p := range ps {
		state := "until " + p.Expires.Local().Format(time.RFC3339)
		if time.Now().After(p.Expires) {
			state = "expired"
		}
		a.out.printf("  %s  %s  account %s, %s\n", esc(p.ID), esc(actionFlag(p.Action)), esc(p.Account), state)
		for _, t := range p.Terms {
			vals := make([]string, len(t.Values))
			for i, v := range t.Values {
				vals[i] = string(v)
			}
			a.out.printf("      %s %s %s\n", esc(t.Path.String()), t.Op, esc(strings.Join(vals, " ")))
		}
		if p.Description != "" {
			a.out.printf("      %s\n", esc(p.Description))
		}
	}
	return nil
}

type permissionsRevokeOptions struct {
	app    *app
	Domain string
	ID     string
}

func newCmdPermissionsRevoke(a *app, runF func(context.Context, *permissionsRevokeOptions) error) *cobra.Command {
	opts := &permissionsRevokeOptions{app: a}
	return &cobra.Command{
		Use: "revoke DOMAIN ID", Short: "Revoke a standing permission",
		Example: "  poppy permissions revoke example.com perm_123",
		Args:    cobra.ExactArgs(2), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain, opts.ID = args[0], args[1]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runPermissionsRevoke(cmd.Context(), opts)
		},
	}
}

func runPermissionsRevoke(ctx context.Context, opts *permissionsRevokeOptions) error {
	a := opts.app
	_, oc, err := a.opsSession(ctx, opts.Domain, nil)
	if err != nil {
		return err
	}
	if err := oc.Revoke(ctx, opts.ID); err != nil {
		return err
	}
	a.out.emit(map[string]any{"revoked": opts.ID})
	a.out.printf("Revoked %s\n", esc(opts.ID))
	return nil
}

// parseAction reads --action.
func parseAction(s string) (operations.Action, error) {
	switch {
	case s == "conversation":
		return operations.ConversationAction(), nil
	case strings.HasPrefix(s, "mcp:") && len(s) > 4:
		return operations.ToolAction(s[4:]), nil
	case strings.HasPrefix(s, "openapi:"):
		m, p, ok := strings.Cut(strings.TrimSpace(s[8:]), " ")
		if ok && m != "" && strings.HasPrefix(p, "/") {
			return operations.OpenAPIAction(strings.ToUpper(m), p), nil
		}
	}
	return operations.Action{}, usageError{err: fmt.Errorf(`poppy: --action %q: want "openapi:METHOD /path", "mcp:TOOL" or "conversation"`, s)}
}

// escLines escapes each line of s, indented.
func escLines(s, indent string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		b.WriteString(indent + esc(l) + "\n")
	}
	return b.String()
}

// actionFlag writes an Action as --action takes it.
func actionFlag(a operations.Action) string {
	if a.Channel == "conversation" || a.Name == "" {
		return a.Channel
	}
	return a.Channel + ":" + a.Name
}
