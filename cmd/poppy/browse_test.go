package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/poppyproto/poppy/browser/headless"
	"github.com/poppyproto/poppy/internal/realtest"
)

// poppy browse with a real headless Chromium (testdata/browse): skipped,
// or failed under POPPY_TEST_REAL=1, without one; not served from go
// test's cache of a run without one (realtest.WatchPATH).
func TestBrowseScripts(t *testing.T) {
	realtest.WatchPATH()
	if _, err := headless.LookPath(); err != nil {
		realtest.Missing(t, "headless Chromium", "no chromium on PATH (install the Debian package chromium, as .ci/run does)")
	}
	testscript.Run(t, scriptParams("testdata/browse"))
}
