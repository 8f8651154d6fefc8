package main

// poppy ops and poppy permissions: the operations extension (OPS). An
// operation proposed through "poppy api" or "poppy mcp call" is remembered
// under the command's own keystore kind (domain, ID and the action that
// proposed it) so that a later process finds it: the SDK journals only
// proposals it sent itself and confirms. "ops show" and "ops confirm" read
// the operation from the Company (Client.Get) in any case, so an ID seen
// elsewhere works too.
//
// Approval comes only from the User at the terminal, as a typed "yes", or
// from a standing permission that covers every term. With --json, the
// command never approves from a stdin that is not a terminal: a script
// can't approve for the User.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// through the terminal.
func (a *app) opsClient(s *poppy.Session) (*operations.Client, error) {
	c, err := operations.New(s, &operations.Options{Approver: operations.ApproverFunc(a.approve), Logger: a.log})
	if errors.Is(err, operations.ErrNotSupported) {
		return nil, &hintError{err: err, code: exitError, hint: "the Company does not offer the operations extension (see: poppy discover DOMAIN)"}
	}
	return c, err
}

// observeOperation reads the operation an API answer or tool result
// carries and remembers it for ops list. The operations Client the call
// went through has observed and journalled it already (api's
// OpenAPIOptions.Operations and MCPOptions.Operations).
func (a *app) observeOperation(ctx context.Context, c *poppy.Company, raw json.RawMessage, action operations.Action) (*operations.Operation, error) {
	op, err := operations.Parse(raw)
	if err != nil {
		return nil, err
	}
	a.rememberOp(ctx, c.Domain(), op, &action)
	return op, nil
}

// opView is an operation in --json output: the wire form (OPS 3).
func opJSON(op *operations.Operation) json.RawMessage {
	b, err := op.MarshalJSON()
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// errNoTerminal: the User can't be asked.
var errNoTerminal = errors.New("poppy: approval needs your answer on a terminal, and --json was given without one")

// approve asks the User on the terminal (OPS 5.1). Only an explicit "yes"
// approves.
func (a *app) approve(ctx context.Context, req *operations.ApprovalRequest) (operations.Decision, error) {
	if a.out.json && !isTerminal(a.stdin) {
		return operations.Decline, errNoTerminal
	}
	w := a.out.prompt()
	fmt.Fprintf(w, "\n%s %s asks you to approve:\n", a.out.bold(esc(req.Company)), "("+esc(req.Domain)+")")
	fmt.Fprintf(w, "  %s\n", esc(req.Summary))
	if len(req.Terms) > 0 {
		// Indented as they are, not decoded: every member shows, in the
		// Company's order, duplicates included (operations' one reading).
		var terms bytes.Buffer
		if json.Indent(&terms, req.Terms, "", "  ") != nil {
			terms.Reset()
			terms.Write(req.Terms)
		}
		fmt.Fprintf(w, "  terms:\n%s", escLines(terms.String(), "    "))
	}
	if req.Ambiguity != nil {
		why := req.Ambiguity.Error()
		if ae := (*operations.AmbiguousTermsError)(nil); errors.As(req.Ambiguity, &ae) {
			why = ae.Reason
		}
		fmt.Fprintf(w, "  Warning: these terms can be read more than one way (%s): the summary may not say what they say.\n", esc(why))
	}
	fmt.Fprintf(w, "  operation %s, revision %d", esc(req.OperationID), req.Revision)
	if !req.ExpiresAt.IsZero() {
		fmt.Fprintf(w, ", until %s", req.ExpiresAt.Local().Format("15:04:05 MST"))
	}
	fmt.Fprintln(w)
	switch req.Reason {
	case "terms_changed":
		fmt.Fprintln(w, "  The terms changed since you approved them.")
	case "user_approval_required":
		fmt.Fprintln(w, "  The Company wants your own approval, not a standing permission.")
	}
	fmt.Fprint(w, `Type "yes" to approve, anything else declines: `)
	line, err := readLine(ctx, a.stdin)
	fmt.Fprintln(w)
	if err != nil && !errors.Is(err, io.EOF) {
		return operations.Decline, err
	}
	if strings.TrimSpace(strings.ToLower(line)) == "yes" {
		return operations.Approve, nil
	}
	return operations.Decline, nil
}

// readLine reads one line of stdin, or stops with ctx.
func readLine(ctx context.Context, r io.Reader) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// Byte by byte, so that nothing after the line is consumed: a
		// second question (terms changed) reads the next line.
		var b strings.Builder
		one := make([]byte, 1)
		for b.Len() < 4096 {
			n, err := r.Read(one)
			if n == 1 {
				if one[0] == '\n' {
					break
				}
				b.WriteByte(one[0])
			}
			if err != nil {
				ch <- res{b.String(), err}
				return
			}
		}
		ch <- res{b.String(), nil}
	}()
	select {
	case v := <-ch:
		return v.s, v.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// printOp shows an operation: state, summary, terms and result.
func (a *app) printOp(op *operations.Operation) {
	o := a.out
	o.printf("%s %s: %s\n", o.bold("Operation"), esc(op.ID), esc(string(op.State)))
	o.kv("summary", esc(op.Summary), "revision", fmt.Sprint(op.Revision))
	if len(op.Terms) > 0 {
		o.printf("terms:\n%s", escLines(prettyBody(op.Terms), "  "))
	}
	if !op.ExpiresAt.IsZero() && op.State == operations.StateProposed {
		o.kv("expires", op.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
	}
	if op.URL != "" {
		o.kv("page", esc(op.URL))
	}
	if op.Result != nil {
		o.kv("result", esc(op.Result.Summary))
	}
}

func addOpsCommands(root *cobra.Command, a *app) {
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

confirm asks you on the terminal: only a typed "yes" approves; a standing
permission ("poppy permissions") that covers every term approves without
asking. Declining exits with code 4.`,
		GroupID: "apis",
	}
	withOp := func(use, short string, run func(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) error) *cobra.Command {
		return &cobra.Command{
			Use: use + " DOMAIN ID", Short: short, Args: wrapArgs(cobra.ExactArgs(2)), ValidArgsFunction: a.completeDomains,
			RunE: func(cmd *cobra.Command, args []string) error {
				ctx := cmd.Context()
				c, s, err := a.session(ctx, args[0])
				if err != nil {
					return err
				}
				oc, err := a.opsClient(s)
				if err != nil {
					return err
				}
				return run(ctx, c, oc, args[0], args[1])
			},
		}
	}
	get := func(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) (*operations.Operation, error) {
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
	final := func(ctx context.Context, c *poppy.Company, domain string, op *operations.Operation, err error) error {
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

	ops.AddCommand(&cobra.Command{
		Use: "list DOMAIN", Short: "List the operations seen at the Company", Args: wrapArgs(cobra.ExactArgs(1)), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.company(ctx, args[0])
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
		},
	})
	ops.AddCommand(withOp("show", "Show an operation as the Company has it now", func(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) error {
		op, err := get(ctx, c, oc, domain, id)
		if err != nil {
			return err
		}
		a.out.emit(map[string]any{"operation": opJSON(op)})
		a.printOp(op)
		if op.State == operations.StateProposed {
			a.out.printf("\nNot done until you approve it: %s\n", a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(id)))
		}
		return nil
	}))
	ops.AddCommand(withOp("confirm", "Ask you to approve the operation, confirm it and track it to its result", func(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) error {
		op, err := get(ctx, c, oc, domain, id)
		if err != nil {
			return err
		}
		if op.State != operations.StateProposed {
			op, err = oc.Track(ctx, id)
			return final(ctx, c, domain, op, err)
		}
		done, err := oc.Handle(ctx, op)
		return final(ctx, c, domain, done, err)
	}))
	ops.AddCommand(withOp("cancel", "Decline a proposed operation, or ask the Company to stop it", func(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) error {
		op, err := oc.Cancel(ctx, id)
		return final(ctx, c, domain, op, err)
	}))
	ops.AddCommand(withOp("track", "Wait until the operation is final and show its result", func(ctx context.Context, c *poppy.Company, oc *operations.Client, domain, id string) error {
		if _, err := get(ctx, c, oc, domain, id); err != nil {
			return err
		}
		op, err := oc.Track(ctx, id)
		return final(ctx, c, domain, op, err)
	}))
	root.AddCommand(ops)
	root.AddCommand(newPermissionsCmd(a))
}

// opsError says what to do after a failed confirm, cancel or track.
func (a *app) opsError(err error, c *poppy.Company, domain string, op *operations.Operation) error {
	switch {
	case errors.Is(err, errNoTerminal):
		return &hintError{err: err, code: exitDeclined, hint: "nothing was approved; run it on a terminal without --json: " + a.cmdline("ops", "confirm", shellQuote(domain), shellQuote(opID(op)))}
	case errors.Is(err, operations.ErrDeclined):
		return &hintError{err: err, code: exitDeclined, hint: "you declined; the Company was told, and nothing was done"}
	case errors.Is(err, operations.ErrOperationExpired):
		return &hintError{err: err, code: exitError, hint: "ask the Company again for a new proposal (the same poppy api or mcp call)"}
	}
	return a.apiError(err, c, domain, nil)
}

func opID(op *operations.Operation) string {
	if op == nil {
		return "ID"
	}
	return op.ID
}

func newPermissionsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "permissions",
		Short: "Grant, list and revoke standing permissions for operations",
		Long: `permissions manages standing permissions: your approval, given ahead of
time, of operations of one action at one Company whose every term stays
within the limits you set. They are kept in the keystore and apply only
while you are signed in to the same account.`,
		GroupID: "apis",
	}
	var action, desc string
	var anyT, eqT, atMost, atLeast []string
	var ttl time.Duration
	grant := &cobra.Command{
		Use:   "grant DOMAIN --action ACTION [--at-most PATH=N] [--eq PATH=JSON] [--any PATH]...",
		Short: "Approve ahead of time the operations of one action within limits",
		Long: `grant stores a standing permission. --action is "openapi:METHOD /path/{template}",
"mcp:TOOL" or "conversation". Every term of an operation must be covered:
--any PATH (any value), --eq PATH=JSON, --at-most PATH=N, --at-least PATH=N;
PATH joins nested keys with ".", or is a JSON Pointer ("/total.amount") for
a key that holds a dot. --for sets how long it lasts.`,
		Args:              wrapArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			act, err := parseAction(action)
			if err != nil {
				return err
			}
			var terms []operations.Term
			for _, s := range anyT {
				p, err := operations.ParsePath(s)
				if err != nil {
					return usageError{err}
				}
				terms = append(terms, operations.AnyValue(p))
			}
			for _, kv := range eqT {
				s, v, ok := strings.Cut(kv, "=")
				p, err := operations.ParsePath(s)
				if !ok || err != nil || !json.Valid([]byte(v)) {
					return usageError{fmt.Errorf("poppy: --eq %q: want PATH=JSON", kv)}
				}
				terms = append(terms, operations.Term{Path: p, Op: operations.OpEqual, Values: []json.RawMessage{json.RawMessage(v)}})
			}
			for _, kv := range atMost {
				s, v, ok := strings.Cut(kv, "=")
				p, err := operations.ParsePath(s)
				if !ok || err != nil {
					return usageError{fmt.Errorf("poppy: --at-most %q: want PATH=N", kv)}
				}
				terms = append(terms, operations.AtMost(p, v))
			}
			for _, kv := range atLeast {
				s, v, ok := strings.Cut(kv, "=")
				p, err := operations.ParsePath(s)
				if !ok || err != nil {
					return usageError{fmt.Errorf("poppy: --at-least %q: want PATH=N", kv)}
				}
				terms = append(terms, operations.AtLeast(p, v))
			}
			if len(terms) == 0 {
				return usageError{errors.New("poppy: a standing permission needs at least one term (--any, --eq, --at-most, --at-least)")}
			}
			c, s, err := a.session(ctx, args[0])
			if err != nil {
				return err
			}
			if s.Account() == "" {
				return a.signInHint(errors.New("poppy: a standing permission applies to a signed-in account, and this Session is signed out"), c, args[0], nil)
			}
			oc, err := a.opsClient(s)
			if err != nil {
				return err
			}
			p, err := oc.Grant(ctx, operations.Permission{Account: s.Account(), Action: act, Terms: terms, Expires: time.Now().Add(ttl), Description: desc})
			if err != nil {
				return usageError{err}
			}
			a.out.emit(map[string]any{"permission": p})
			a.out.printf("%s %s for %s at %s, until %s\n", a.out.green("Granted"), esc(p.ID), esc(actionFlag(act)), esc(c.Name()), p.Expires.Local().Format(time.RFC3339))
			return nil
		},
	}
	grant.Flags().StringVar(&action, "action", "", `the action: "openapi:METHOD /path", "mcp:TOOL" or "conversation"`)
	grant.Flags().StringArrayVar(&anyT, "any", nil, "cover the term at PATH with any value (repeatable)")
	grant.Flags().StringArrayVar(&eqT, "eq", nil, "cover the term at PATH when it equals the JSON value: PATH=JSON (repeatable)")
	grant.Flags().StringArrayVar(&atMost, "at-most", nil, "cover the number at PATH up to N: PATH=N (repeatable)")
	grant.Flags().StringArrayVar(&atLeast, "at-least", nil, "cover the number at PATH from N: PATH=N (repeatable)")
	grant.Flags().DurationVar(&ttl, "for", 24*time.Hour, "how long the permission lasts")
	grant.Flags().StringVar(&desc, "description", "", "your own words, shown when listing")
	cmd.AddCommand(grant)

	withClient := func(ctx context.Context, domain string) (*poppy.Company, *operations.Client, error) {
		c, s, err := a.session(ctx, domain)
		if err != nil {
			return nil, nil, err
		}
		oc, err := a.opsClient(s)
		return c, oc, err
	}
	cmd.AddCommand(&cobra.Command{
		Use: "list DOMAIN", Short: "List your standing permissions at the Company", Args: wrapArgs(cobra.ExactArgs(1)), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, oc, err := withClient(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ps, err := oc.Permissions(cmd.Context())
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
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use: "revoke DOMAIN ID", Short: "Revoke a standing permission", Args: wrapArgs(cobra.ExactArgs(2)), ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, oc, err := withClient(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := oc.Revoke(cmd.Context(), args[1]); err != nil {
				return err
			}
			a.out.emit(map[string]any{"revoked": args[1]})
			a.out.printf("Revoked %s\n", esc(args[1]))
			return nil
		},
	})
	return cmd
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
	return operations.Action{}, usageError{fmt.Errorf(`poppy: --action %q: want "openapi:METHOD /path", "mcp:TOOL" or "conversation"`, s)}
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
