package poppycheck_test

import (
	"context"
	"testing"

	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// runAgainst checks srv with a fresh agent on agent.test and fails the
// test if the check itself broke a rule of the Personal Agent side: the
// fake records any as a violation (the check sends nothing a correct agent
// wouldn't).
func runAgainst(t *testing.T, srv *poppytest.Server, person poppycheck.Person) *poppycheck.Report {
	t.Helper()
	return runWith(t, srv, &poppycheck.Options{Person: person})
}

// runWith is runAgainst with the check's options (Agent and Clock are set
// here, and HTTPClient when the options have none).
func runWith(t *testing.T, srv *poppytest.Server, opts *poppycheck.Options) *poppycheck.Report {
	t.Helper()
	agent, err := poppycheck.NewAgent("https://agent.test/check/")
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("agent.test", agent.Handler())
	o := *opts
	o.Agent, o.Clock = agent, srv.Clock()
	if o.HTTPClient == nil {
		o.HTTPClient = srv.Client()
	}
	rep, err := poppycheck.Run(context.Background(), "example.test", &o)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range srv.TakeViolations() {
		t.Errorf("the check broke a Personal Agent rule: %v", v)
	}
	return rep
}
