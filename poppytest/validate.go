package poppytest

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// The document validator: every configuration of the fake must publish a
// poppy.json and metadata that a correct Company could publish, except for
// the rule a negative option deliberately breaks.

type problem struct {
	rule, msg string
}

func (p problem) String() string { return p.rule + ": " + p.msg }

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

func isHTTPSURL(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Host != "" && u.User == nil
}

func nonEmptyString(v any) bool {
	s, ok := v.(string)
	return ok && strings.TrimSpace(s) != ""
}

// validateDocument checks doc, the poppy.json served for requested (a
// domain without www.), against the Company rules of spec 3, 3.1, 3.3, 4.4
// and 6.
func validateDocument(doc map[string]any, requested string) []problem {
	var ps []problem
	add := func(rule, format string, args ...any) {
		ps = append(ps, problem{rule, fmt.Sprintf(format, args...)})
	}
	// CO-3-04
	if v, _ := doc["protocol_version"].(string); !versionRE.MatchString(v) {
		add("CO-3-04", "protocol_version %v is not major.minor", doc["protocol_version"])
	}
	// CO-3-05, CO-3-06
	org, _ := doc["organization"].(map[string]any)
	if org == nil || !nonEmptyString(org["name"]) || !nonEmptyString(org["domain"]) {
		add("CO-3-05", "organization needs a non-empty name and domain")
	}
	if org != nil {
		d, _ := org["domain"].(string)
		if strings.TrimPrefix(strings.ToLower(d), "www.") != strings.TrimPrefix(requested, "www.") {
			add("CO-3-06", "organization.domain %q does not match the requested host %q", d, requested)
		}
	}
	// CO-3-08
	_, hasAgent := doc["agent"]
	_, hasAPIs := doc["apis"]
	web, hasWeb := doc["web"]
	if !hasAgent && !hasAPIs && !hasWeb {
		add("CO-3-08", "none of agent, apis or web is present")
	}
	// CO-3-07
	auth, hasAuth := doc["auth"].(map[string]any)
	webMap, _ := web.(map[string]any)
	_, hasBrowser := webMap["browser_session_endpoint"]
	if !hasAuth && (hasAgent || hasAPIs || hasBrowser) {
		add("CO-3-07", "auth is missing although agent, apis or web.browser_session_endpoint is present")
	}
	if hasBrowser && !isHTTPSURL(webMap["browser_session_endpoint"]) {
		add("CO-3-07", "web.browser_session_endpoint is not an https URL")
	}
	if hasAuth {
		if !isHTTPSURL(auth["issuer"]) {
			add("CO-3-07", "auth.issuer %v is not an https URL", auth["issuer"])
		}
		ps = append(ps, validateAuth(auth)...)
	}
	// CO-3-09
	if hasAgent {
		agent, _ := doc["agent"].(map[string]any)
		protos, ok := agent["protocols"].([]any)
		if !ok || len(protos) == 0 {
			add("CO-3-09", "agent.protocols must be a non-empty list")
		}
		for i, p := range protos {
			e, _ := p.(map[string]any)
			if e == nil || !nonEmptyString(e["type"]) || !isHTTPSURL(e["endpoint"]) {
				add("CO-3-09", "agent.protocols[%d] needs a type and an https endpoint", i)
			}
			if r, ok := e["resource"]; ok && !nonEmptyString(r) {
				add("CO-3-12", "agent.protocols[%d].resource must be a string", i)
			}
		}
	}
	// CO-3-10, CO-6-01
	if hasAPIs {
		apis, ok := doc["apis"].([]any)
		if !ok {
			add("CO-3-10", "apis must be a list")
		}
		for i, a := range apis {
			e, _ := a.(map[string]any)
			if e == nil || !nonEmptyString(e["type"]) || !isHTTPSURL(e["url"]) || !nonEmptyString(e["description"]) {
				add("CO-3-10", "apis[%d] needs a type, an https url and a description", i)
				continue
			}
			if t := e["type"].(string); t != "openapi" && t != "mcp" {
				add("CO-6-01", "apis[%d].type %q is neither openapi nor mcp", i, t)
			}
			if r, ok := e["resource"]; ok && !nonEmptyString(r) {
				add("CO-3-13", "apis[%d].resource must be a string", i)
			}
		}
	}
	// CO-3.3-01
	if ext, ok := doc["extensions"]; ok {
		m, ok := ext.(map[string]any)
		if !ok {
			add("CO-3.3-01", "extensions must be an object")
		}
		for name, v := range m {
			if !validExtensionName(name) {
				add("CO-3.3-01", "extension %q is neither a protocol extension nor named <domain>/<name>", name)
			}
			e, _ := v.(map[string]any)
			if e == nil || !nonEmptyString(e["version"]) {
				add("CO-3.3-01", "extension %q needs a version string", name)
			}
		}
	}
	return ps
}

// protocolExtensions are the extensions defined with the protocol.
var protocolExtensions = []string{"operations"}

var extDomainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+/[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$`)

func validExtensionName(n string) bool {
	return slices.Contains(protocolExtensions, n) || extDomainRE.MatchString(n)
}

// validateAuth checks the sign-in types and scopes (CO-3-11, CO-4.4-04).
func validateAuth(auth map[string]any) []problem {
	var ps []problem
	add := func(rule, format string, args ...any) {
		ps = append(ps, problem{rule, fmt.Sprintf(format, args...)})
	}
	custom, _ := auth["custom_scopes"].(map[string]any)
	if c, ok := auth["custom_scopes"]; ok && custom == nil {
		add("CO-3-11", "auth.custom_scopes must be an object, got %T", c)
	}
	for name, desc := range custom {
		if strings.HasPrefix(name, "poppy:") {
			add("CO-4.4-04", "custom scope %q uses the reserved poppy: prefix", name)
		}
		if !validScopeToken(name) {
			add("CO-4.4-04", "custom scope %q is not an OAuth scope token", name)
		}
		if !nonEmptyString(desc) {
			add("CO-4.4-03", "custom scope %q needs a description", name)
		}
	}
	checkScopes := func(typ string, v any) {
		list, ok := v.([]any)
		if !ok {
			if ss, ok2 := v.([]string); ok2 {
				for _, s := range ss {
					list = append(list, s)
				}
				ok = true
			}
		}
		if !ok || len(list) == 0 {
			add("CO-3-11", "auth.%s.scopes must be a non-empty list", typ)
			return
		}
		for _, sc := range list {
			name, _ := sc.(string)
			if name != "poppy:read" && name != "poppy:write" && custom[name] == nil {
				add("CO-3-11", "auth.%s.scopes lists %q, which is neither a protocol scope nor in custom_scopes", typ, name)
			}
		}
	}
	for _, typ := range []string{"direct", "device"} {
		if v, ok := auth[typ]; ok {
			m, _ := v.(map[string]any)
			checkScopes(typ, m["scopes"])
		}
	}
	if v, ok := auth["mediated"]; ok {
		m, _ := v.(map[string]any)
		if !isHTTPSURL(m["endpoint"]) {
			add("CO-3-11", "auth.mediated.endpoint must be an https URL")
		}
		fields, ok := m["fields"].([]any)
		if !ok || len(fields) == 0 {
			add("CO-3-11", "auth.mediated.fields must be a non-empty list")
		}
		for i, f := range fields {
			e, _ := f.(map[string]any)
			_, isBool := e["secret"].(bool)
			if e == nil || !nonEmptyString(e["name"]) || !nonEmptyString(e["label"]) || !isBool {
				add("CO-3-11", "auth.mediated.fields[%d] needs name, label and a boolean secret", i)
			}
		}
		checkScopes("mediated", m["scopes"])
	}
	return ps
}

// validScopeToken reports whether s is an RFC 6749 scope-token.
func validScopeToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < 0x21 || c == 0x22 || c == 0x5c || c > 0x7e {
			return false
		}
	}
	return true
}

// validateMetadata checks the RFC 8414 metadata against the documents that
// name its issuer (CO-3.2-02..05).
func validateMetadata(meta map[string]any, docs map[string]map[string]any) []problem {
	var ps []problem
	add := func(rule, format string, args ...any) {
		ps = append(ps, problem{rule, fmt.Sprintf(format, args...)})
	}
	if !isHTTPSURL(meta["issuer"]) {
		add("CO-3.2-02", "metadata issuer %v is not an https URL", meta["issuer"])
	}
	for _, k := range []string{"token_endpoint", "revocation_endpoint"} {
		if !isHTTPSURL(meta[k]) {
			add("CO-3.2-04", "metadata %s is missing or not an https URL", k)
		}
	}
	listed := map[string]bool{}
	switch v := meta["poppy_domains"].(type) {
	case []string:
		for _, d := range v {
			listed[d] = true
		}
	case []any:
		for _, d := range v {
			if s, ok := d.(string); ok {
				listed[s] = true
			}
		}
	}
	for domain, doc := range docs {
		auth, _ := doc["auth"].(map[string]any)
		if auth == nil || auth["issuer"] != meta["issuer"] {
			continue
		}
		if !listed[domain] {
			add("CO-3.2-03", "poppy_domains does not list %q, whose poppy.json names the issuer", domain)
		}
		if _, ok := auth["direct"]; ok && !isHTTPSURL(meta["authorization_endpoint"]) {
			add("CO-3.2-05", "auth.direct is offered but authorization_endpoint is missing")
		}
		if _, ok := auth["device"]; ok && !isHTTPSURL(meta["device_authorization_endpoint"]) {
			add("CO-3.2-05", "auth.device is offered but device_authorization_endpoint is missing")
		}
	}
	return ps
}
