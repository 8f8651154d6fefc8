package tzname

import (
	"archive/zip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, n := range []string{"America/Los_Angeles", "Europe/Paris", "UTC", "Etc/GMT+5", "US/Pacific", "Asia/Kolkata"} {
		if !Valid(n) {
			t.Errorf("Valid(%q) = false", n)
		}
	}
	for _, n := range []string{"", "Local", "Mars/Olympus_Mons", "america/los_angeles", "../etc/passwd", "/etc/localtime", "Europe/Paris ", strings.Repeat("A", 65)} {
		if Valid(n) {
			t.Errorf("Valid(%q) = true", n)
		}
	}
}

// The list is the toolchain's tz database, name for name: after a Go
// upgrade that adds or removes zones this fails until names.go is
// generated again (go generate ./internal/tzname).
func TestNamesAreTheToolchainDatabase(t *testing.T) {
	root := runtime.GOROOT()
	if r := os.Getenv("GOROOT"); r != "" {
		root = r
	}
	zr, err := zip.OpenReader(filepath.Join(root, "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Skipf("no toolchain zoneinfo.zip to compare with: %v", err)
	}
	defer zr.Close()
	var want []string
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, "/") {
			want = append(want, f.Name)
		}
	}
	slices.Sort(want)
	if !slices.Equal(want, names[:]) {
		t.Fatalf("names.go has %d names, the toolchain's database %d: run go generate ./internal/tzname", len(names), len(want))
	}
	if !slices.IsSorted(names[:]) {
		t.Fatal("names are not sorted")
	}
}
