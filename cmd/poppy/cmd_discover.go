package main

// poppy discover: what a Company offers (spec 3).

import (
	"context"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/poppyproto/poppy"
)

type discoverJSON struct {
	Domain         string                `json:"domain"`
	Name           string                `json:"name"`
	Issuer         string                `json:"issuer,omitempty"`
	Protocol       string                `json:"protocol_version"`
	SignIn         []signInTypeJSON      `json:"sign_in"`
	CustomScopes   map[string]string     `json:"custom_scopes,omitempty"`
	APIs           []poppy.API           `json:"apis"`
	Protocols      []poppy.Protocol      `json:"protocols"`
	Extensions     map[string]extJSON    `json:"extensions"`
	BrowserSession string                `json:"browser_session_endpoint,omitempty"`
	Mediated       []poppy.MediatedField `json:"mediated_fields,omitempty"`
}

type signInTypeJSON struct {
	Type   string   `json:"type"`
	Scopes []string `json:"scopes"`
}

type extJSON struct {
	Version string `json:"version"`
}

type discoverOptions struct {
	app    *app
	Domain string
}

func newCmdDiscover(a *app, runF func(context.Context, *discoverOptions) error) *cobra.Command {
	opts := &discoverOptions{app: a}
	return &cobra.Command{
		Use:   "discover DOMAIN",
		Short: "Show what a Company offers: sign-in types, scopes, APIs, protocols, extensions",
		Example: `  poppy discover example.com
  poppy --json discover example.com | jq .sign_in`,
		GroupID:           "company",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeDomains,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Domain = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runDiscover(cmd.Context(), opts)
		},
	}
}

func runDiscover(ctx context.Context, opts *discoverOptions) error {
	a := opts.app
	c, err := a.company(ctx, opts.Domain)
	if err != nil {
		return err
	}
	d := describeCompany(c)
	a.out.emit(d)
	o := a.out
	o.printf("%s %s\n", o.bold(esc(d.Name)), o.dim("("+esc(d.Domain)+", protocol "+esc(d.Protocol)+")"))
	// One list, so that every label is aligned with the others.
	var kv []string
	if d.Issuer != "" {
		kv = append(kv, "issuer", esc(d.Issuer))
	}
	if len(d.SignIn) == 0 {
		kv = append(kv, "sign-in", "none offered")
	}
	for _, t := range d.SignIn {
		kv = append(kv, "sign-in "+t.Type, escJoin(t.Scopes))
	}
	for _, f := range d.Mediated {
		secret := ""
		if f.Secret {
			secret = " (secret)"
		}
		kv = append(kv, "  asks for", esc(f.Label)+secret)
	}
	for _, name := range sortedKeys(d.CustomScopes) {
		kv = append(kv, "scope "+esc(name), esc(d.CustomScopes[name]))
	}
	for _, api := range d.APIs {
		kv = append(kv, "api "+esc(api.Type), esc(api.URL)+"  "+esc(api.Description))
	}
	for _, p := range d.Protocols {
		kv = append(kv, "protocol "+esc(p.Type), esc(p.Endpoint))
	}
	for _, name := range sortedKeys(d.Extensions) {
		kv = append(kv, "extension "+esc(name), "version "+esc(d.Extensions[name].Version))
	}
	if d.BrowserSession != "" {
		kv = append(kv, "browser sessions", esc(d.BrowserSession))
	}
	o.kv(kv...)
	return nil
}

func describeCompany(c *poppy.Company) *discoverJSON {
	doc := c.Document()
	d := &discoverJSON{Domain: c.Domain(), Name: c.Name(), Issuer: c.Issuer(), Protocol: doc.ProtocolVersion,
		SignIn: []signInTypeJSON{}, APIs: append([]poppy.API{}, doc.APIs...), Protocols: []poppy.Protocol{}, Extensions: map[string]extJSON{}}
	if doc.Auth != nil {
		for _, t := range c.SignInTypes() {
			var scopes []string
			switch t {
			case "direct":
				if doc.Auth.Direct != nil {
					scopes = doc.Auth.Direct.Scopes
				}
			case "device":
				if doc.Auth.Device != nil {
					scopes = doc.Auth.Device.Scopes
				}
			case "mediated":
				if doc.Auth.Mediated == nil {
					continue
				}
				scopes = doc.Auth.Mediated.Scopes
				d.Mediated = doc.Auth.Mediated.Fields
			}
			d.SignIn = append(d.SignIn, signInTypeJSON{Type: t, Scopes: append([]string{}, scopes...)})
		}
		if len(doc.Auth.CustomScopes) > 0 {
			d.CustomScopes = map[string]string(doc.Auth.CustomScopes)
		}
	}
	if doc.Agent != nil {
		d.Protocols = append(d.Protocols, doc.Agent.Protocols...)
	}
	for name, e := range doc.Extensions {
		d.Extensions[name] = extJSON{Version: e.Version}
	}
	if doc.Web != nil {
		d.BrowserSession = doc.Web.BrowserSessionEndpoint
	}
	return d
}

func escJoin(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = esc(s)
	}
	return strings.Join(out, " ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// completeDomains offers the Companies this keystore has used.
func (a *app) completeDomains(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	store, err := a.openStore()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	recs, _ := knownCompanies(cmd.Context(), store)
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		if !seen[r.Domain] {
			seen[r.Domain] = true
			out = append(out, r.Domain)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
