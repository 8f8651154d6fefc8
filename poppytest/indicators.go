package poppytest

// Resource indicators held to the grant (Options.SignIn.StrictResourceIndicators).
//
// RFC 8707 section 2.2 lets an authorization server issue a refresh token
// only for the resources named at authorization and refuse a token request
// whose resource is missing or ambiguous. oidc-provider does so by default
// (lib/helpers/resolve_resource.js): a token request that names a resource
// gets a token for it if the grant holds it; one that names none gets the
// grant's resource when there is exactly one, and is refused when there
// are several; one that names several is refused. This file models that
// rule, so that the SDK's sign-in can be tested against it without a
// server the project didn't write.

import "slices"

// strictTargetDesc is oidc-provider's own description of the refusal.
const strictTargetDesc = "only a single resource indicator value must be requested/resolved during Access Token Request"

// holdToGranted applies StrictResourceIndicators to spec, a validated
// token request of a sign-in's grant whose authorization named granted:
// it sets spec.resource to the resource the token is for, or refuses the
// request with invalid_target. signIn marks a code exchange or device
// poll, whose Account Token is then held to granted. Without the option
// it only records granted for that Account Token.
func (s *Server) holdToGranted(spec *issueSpecT, g *grantRequest, granted []string, signIn bool) *protoError {
	if signIn {
		spec.authorized = slices.Clone(granted)
	}
	if !s.opts.SignIn.StrictResourceIndicators {
		return nil
	}
	named := g.form["resource"]
	switch {
	case len(named) > 1:
		return &protoError{code: "invalid_target", desc: strictTargetDesc}
	case len(named) == 1 && !slices.Contains(granted, named[0]):
		return &protoError{code: "invalid_target", desc: "the resource was not named at authorization"}
	case len(named) == 0 && len(granted) > 1:
		return &protoError{code: "invalid_target", desc: strictTargetDesc}
	case len(named) == 0 && len(granted) == 1:
		spec.resource = granted[0] // the grant's only resource
	}
	return nil
}
