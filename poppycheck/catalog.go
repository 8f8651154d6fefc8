package poppycheck

// unobservable says, for each Company rule the check never tests, why: an
// agent can't see it from outside, or only with a request that breaks a
// rule of its own, or only with a User. docs/check.md lists the same.
var unobservable, conditional = func() (map[string]string, map[string]string) {
	m, cond := map[string]string{}, map[string]string{}
	set := func(reason string, ids ...string) {
		for _, id := range ids {
			m[id] = reason
		}
	}
	// when lists rules the check sees only when the Company offers what
	// they are about, or in an interactive run.
	when := func(reason string, ids ...string) {
		for _, id := range ids {
			cond[id] = reason
		}
	}
	set("a permission or a choice of the Company's policy: nothing an agent sees breaks it",
		"CO-3.2-06", "CO-4-01", "CO-4.1-05", "CO-4.1-06", "CO-4.1-07", "CO-4.1-08", "CO-4.1-09", "CO-4.2-12",
		"CO-4.4-01", "CO-4.4-05", "CO-7.5-05", "CO-7.6-03", "CO-OPS3-02", "CO-OPS8-01", "CO-7.4-04")
	set("inside the Company: a token is opaque to an agent, so whether it holds session credentials, and encrypted, can't be seen",
		"CO-4.2-13")
	set("inside the Company: what it makes of the agent's message IDs can't be seen", "CO-7.2-07")
	set("needs two domains of one Company; the check looks at one", "CO-3.2-01")
	set("seeing it takes a request that breaks a Personal Agent rule (a bad or replayed assertion, a replayed proof, a wrong ath, a proof for another URL (PA-4.3-08), a Bearer token at a DPoP API or a DPoP one at MCP, a token in a URL, a bad message ID); the check sends only what a correct agent sends",
		"CO-3.3-03", "CO-4.1-02", "CO-4.1-03", "CO-4.1-04", "CO-4.2-01", "CO-4.2-02", "CO-4.2-03", "CO-4.2-04",
		"CO-4.2-08", "CO-4.3-04", "CO-4.3-06", "CO-4.3-07", "CO-4.3-14", "CO-4.3-15", "CO-4.3-20", "CO-6-06", "CO-7.2-08",
		"CO-7.3-04", "CO-7.4-01", "CO-5-02", "CO-5-03", "CO-5-04", "CO-5-05", "CO-5-06", "CO-5-07", "CO-5-08",
		"CO-5-10", "CO-5-13", "CO-4.8-04", "CO-4.8-03")
	set("needs a second account of the same person at the Company", "CO-4.4-12")
	set("what looks unusual is the Company's own judgement", "CO-4.7-08")
	set("an agent ends a Session by no longer using it: nothing to send, nothing to see", "CO-4.9-05")
	set("needs the person to disconnect the agent in their account settings at the Company", "CO-4.9-06")
	set("needs a second client or another User's request on the same object; the check is one agent for one User",
		"CO-7.2-01", "CO-7.2-02", "CO-7.2-03", "CO-7.2-04", "CO-4.5-07", "CO-4.5-08", "CO-4.6-06", "CO-4.7-03", "CO-4.8-05", "CO-4.8-06", "CO-OPS3-15", "CO-OPS3-16", "CO-OPS5-01")
	set("needs a real browser following the Company's website over time; the check posts the join and reads the cookie only",
		"CO-5-01", "CO-5-14", "CO-5-15", "CO-5-18", "CO-5-19", "CO-5-20")
	when("seen only when the Company answers 429, which a run that sends a few dozen requests rarely provokes (the check never floods a Company to see it), or with --failed-sign-ins, whose attempts a Company must refuse with 429",
		"CO-4.3-21")
	when("seen only when the Company requires DPoP nonces (a MAY)", "CO-4.3-10")
	set("needs a person at the Company: the check never asks for a handoff", "CO-7.9-01", "CO-7.9-02", "CO-7.9-03", "CO-7.9-04", "CO-7.7-03", "CO-7.7-04")
	set("needs the Company to ask for the User (user_requested) in a conversation; the check's conversation says it needs no reply",
		"CO-7.10-01", "CO-7.10-02", "CO-7.10-03", "CO-7.10-04", "CO-7.10-05", "CO-7.10-06", "CO-7.10-07", "CO-7.10-08", "CO-7.10-09")
	set("needs a conversation about the User's account, which the check never starts",
		"CO-7.11-01", "CO-7.11-02", "CO-7.11-03", "CO-7.11-04", "CO-7.11-05", "CO-7.11-06", "CO-7.4-05", "CO-7.12-04", "CO-7.5-08")
	set("needs an operation proposed and confirmed; the check never proposes one, since confirming acts on the person's account",
		"CO-OPS2-03", "CO-OPS2-04", "CO-OPS3-01", "CO-OPS3-03", "CO-OPS3-04", "CO-OPS3-05", "CO-OPS3-06", "CO-OPS3-07",
		"CO-OPS3-08", "CO-OPS3-09", "CO-OPS3-10", "CO-OPS3-11", "CO-OPS3-13", "CO-OPS3-14", "CO-OPS3-17",
		"CO-OPS4-02", "CO-OPS4-03", "CO-OPS4-04", "CO-OPS4-05", "CO-OPS4-06", "CO-OPS5-02", "CO-OPS5-03", "CO-OPS5-04",
		"CO-OPS5-05", "CO-OPS5-06", "CO-OPS5-07", "CO-OPS6-02", "CO-OPS6-03", "CO-OPS6-04", "CO-OPS6-05",
		"CO-OPS7-01", "CO-OPS7-02", "CO-OPS7-03", "CO-3.3-04")
	set("needs the MCP server's tools to say which scopes each needs, which MCP doesn't", "CO-6-05")
	when("seen in an interactive run when a sign-in grants fewer scopes than a GET of the OpenAPI description needs", "CO-6-11")
	when("seen in an interactive run when the Company ends the Sessions at sign-out (a MAY)", "CO-4.9-02")
	when("seen in an interactive run when the Company doesn't check on each request that the Session is still signed in", "CO-4.9-04")
	when("seen in an interactive run when the Company rotates Account Tokens that expire", "CO-4.8-08")
	set("needs an MCP client that signs in through MCP's own flow, not a Personal Agent", "CO-6-08")
	set("about what the person sees or does on the Company's page; the check sees only where it ends",
		"CO-4.5-01", "CO-4.5-02", "CO-4.6-01", "CO-4.6-02")
	set("needs a sign-in that waits, fails or expires on purpose: run with --interactive and decline, or wait out a code",
		"CO-4.4-10", "CO-4.5-04", "CO-4.5-06", "CO-4.6-03", "CO-4.6-04", "CO-4.6-05", "CO-4.7-04", "CO-4.7-05")
	when("needs a Mediated Sign-In with wrong credentials: run with --failed-sign-ins, whose made-up credentials must fail", "CO-4.7-09")
	when("seen only when the Company asks for a one-time code", "CO-4.7-02", "CO-4.7-08")
	when("needs failed Mediated Sign-Ins in a row: run with --failed-sign-ins (Options.FailedSignIns), which makes up to 6 attempts with made-up credentials", "CO-4.7-06")
	when("needs an operation proposed and confirmed: in an interactive run, Options.Propose names an action the check proposes and, once the person approves it, confirms; the check never proposes one by itself, since confirming acts on the person's account", "CO-OPS6-01")
	when("needs an operation proposed twice: in an interactive run, Options.Propose names an action the check proposes, then asks for again while it is open, wanting the same operation back", "CO-OPS4-01")
	when("needs a signed-in Session: run with --interactive",
		"CO-4.4-06", "CO-4.4-11", "CO-4.4-13", "CO-4.5-03", "CO-4.5-05", "CO-4.7-01", "CO-4.7-07",
		"CO-4.8-01", "CO-4.8-02", "CO-4.8-07", "CO-4.8-09", "CO-4.8-10",
		"CO-4.9-01", "CO-4.9-03", "CO-4.9-07")
	when("seen only when the Company's entries name a resource (a MAY)", "CO-3-12", "CO-3-13", "CO-4.3-18", "CO-OPS2-02")
	when("seen only when the well-known URL redirects", "CO-3-02", "CO-3-03")
	when("needs a conversation the Company answers with text-delta pieces in a stream", "CO-7.6-05")
	return m, cond
}()
