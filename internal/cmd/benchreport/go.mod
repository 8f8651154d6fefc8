module github.com/poppyproto/poppy/internal/cmd/benchreport

go 1.26.0

require golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da

require github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect

// Development is one tree (go.work at the root); outside it, the module
// builds against the root module beside it.
replace github.com/poppyproto/poppy => ../../..
