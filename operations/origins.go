package operations

// The Company's origins, for an operation's url (OPS 3, 4.4).
//
// An operation's url is shown to the User as "the Company's page for this
// operation", so a Client keeps it only when its origin (https, host,
// port) is one the Company's documents name: the domain the Company was
// resolved from and its organization.domain (each with and without a
// leading "www.", A-01), and the origin of every URL in poppy.json and in
// the OAuth metadata (endpoints, resources, the issuer). A url elsewhere,
// such as https://evil-test-billing.example/…, is dropped from the
// Client's views, and so never reaches the Approver, the poppy command or
// a model as the Company's. A url with user information
// (https://example.com@evil.test/) is dropped as well: it reads as a host
// it is not.

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/poppyproto/poppy"
)

// originOf returns the origin of an https URL, lower case, without the
// default port; ok is false for any other URL, or one with user
// information.
func originOf(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(u.Scheme, "https") || u.Host == "" || u.User != nil || u.Opaque != "" {
		return "", false
	}
	return hostOrigin(u.Hostname(), u.Port()), true
}

func hostOrigin(host, port string) string {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if strings.Contains(h, ":") {
		h = "[" + h + "]" // IPv6
	}
	if port == "" || port == "443" {
		return "https://" + h
	}
	return "https://" + h + ":" + port
}

// companyOrigins lists the origins c's documents name.
func companyOrigins(c *poppy.Company) map[string]bool {
	out := map[string]bool{}
	addHost := func(hostport string) {
		if hostport == "" {
			return
		}
		u := url.URL{Host: hostport}
		h := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
		if h == "" {
			return
		}
		out[hostOrigin(h, u.Port())] = true
		if bare, ok := strings.CutPrefix(h, "www."); ok {
			out[hostOrigin(bare, u.Port())] = true
		} else {
			out[hostOrigin("www."+h, u.Port())] = true
		}
	}
	add := func(raw string) {
		if o, ok := originOf(raw); ok {
			out[o] = true
		}
	}
	addHost(c.Domain())
	doc := c.Document()
	if doc == nil {
		return out
	}
	if doc.Organization != nil {
		addHost(doc.Organization.Domain)
	}
	if a := doc.Auth; a != nil {
		add(a.Issuer)
		if a.Mediated != nil {
			add(a.Mediated.Endpoint)
		}
	}
	if doc.Agent != nil {
		for _, p := range doc.Agent.Protocols {
			add(p.Endpoint)
			add(p.Resource)
		}
	}
	for _, api := range doc.APIs {
		add(api.URL)
		add(api.Resource)
	}
	for _, e := range doc.Extensions {
		var v struct {
			Endpoint string `json:"endpoint"`
			Resource string `json:"resource"`
		}
		if json.Unmarshal(e.Raw, &v) == nil {
			add(v.Endpoint)
			add(v.Resource)
		}
	}
	if doc.Web != nil {
		add(doc.Web.BrowserSessionEndpoint)
	}
	if m := c.Metadata(); m != nil {
		add(m.Issuer)
		add(m.TokenEndpoint)
		add(m.RevocationEndpoint)
		add(m.AuthorizationEndpoint)
		add(m.DeviceAuthorizationEndpoint)
	}
	return out
}

// companyURL reports whether raw is on one of the Company's origins.
func (c *Client) companyURL(raw string) bool {
	o, ok := originOf(raw)
	return ok && c.origins[o]
}
