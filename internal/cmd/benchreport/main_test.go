package main

import (
	"slices"
	"strings"
	"testing"
)

// The build cost section is found up to the next section, or the end.
func TestSection(t *testing.T) {
	md := "# Performance\n\n| a |\n\n## Build cost\n\nfigures\n\n## benchstat\n\n```\n```\n"
	if got, want := section(md, "## Build cost"), "## Build cost\n\nfigures\n\n"; got != want {
		t.Fatalf("section = %q, want %q", got, want)
	}
	if got := section(md+"## Build cost\n\nlast\n", "## Build cost"); got != "## Build cost\n\nfigures\n\n" {
		t.Fatalf("the first section: %q", got)
	}
	if got := section("# Performance\n\n## Build cost\n\nlast\n", "## Build cost"); got != "## Build cost\n\nlast\n" {
		t.Fatalf("a section at the end: %q", got)
	}
	if got := section("# Performance\n", "## Build cost"); got != "" {
		t.Fatalf("no section: %q", got)
	}
}

// TestFloorGuard: a row whose figure costs less than 0.95× its floor is
// refused by a full run, for times, rates and allocations alike; a row
// that compares two figures is not, nor any by -smoke (single samples).
func TestFloorGuard(t *testing.T) {
	rows := []row{
		{figure: "Req", floor: "Floor", unit: "ns/op", smokeRatio: 5},
		{figure: "Events", floor: "Events", unit: "events/s", floorUnit: "floor-events/s", rate: true, smokeRatio: 5},
		{figure: "Allocs", floor: "Floor", unit: "allocs/op", diff: true, smokeRatio: 20},
		{figure: "CPU", floor: "CPU", unit: "lp-ns", floorUnit: "sse-ns", compare: true, smokeRatio: 10},
	}
	for _, tc := range []struct {
		name  string
		med   map[key]float64
		smoke bool
		want  []string // rows refused
	}{
		{"at their floors", map[key]float64{
			{"Req", "ns/op"}: 100, {"Floor", "ns/op"}: 100, {"Events", "events/s"}: 100, {"Events", "floor-events/s"}: 100,
			{"Allocs", "allocs/op"}: 10, {"Floor", "allocs/op"}: 10, {"CPU", "lp-ns"}: 3, {"CPU", "sse-ns"}: 1,
		}, false, nil},
		{"within noise", map[key]float64{
			{"Req", "ns/op"}: 96, {"Floor", "ns/op"}: 100, {"Events", "events/s"}: 104, {"Events", "floor-events/s"}: 100,
			{"Allocs", "allocs/op"}: 99, {"Floor", "allocs/op"}: 100, {"CPU", "lp-ns"}: 1, {"CPU", "sse-ns"}: 1,
		}, false, nil},
		{"cheaper than their floors", map[key]float64{
			{"Req", "ns/op"}: 79, {"Floor", "ns/op"}: 100, {"Events", "events/s"}: 110, {"Events", "floor-events/s"}: 100,
			{"Allocs", "allocs/op"}: 90, {"Floor", "allocs/op"}: 100, {"CPU", "lp-ns"}: 1, {"CPU", "sse-ns"}: 3,
		}, false, []string{"Req", "Events", "Allocs"}},
		{"the median of the runs' ratios, where a benchmark reports it", map[key]float64{
			{"Req", "ns/op"}: 100, {"Floor", "ns/op"}: 100, {"Events", "events/s"}: 80, {"Events", "floor-events/s"}: 100,
			{"Events", "ratio"}: 1.2, {"Allocs", "allocs/op"}: 10, {"Floor", "allocs/op"}: 10, {"CPU", "lp-ns"}: 3, {"CPU", "sse-ns"}: 1,
		}, false, []string{"Events"}},
		{"smoke: single samples", map[key]float64{
			{"Req", "ns/op"}: 79, {"Floor", "ns/op"}: 100, {"Events", "events/s"}: 110, {"Events", "floor-events/s"}: 100,
			{"Allocs", "allocs/op"}: 90, {"Floor", "allocs/op"}: 100, {"CPU", "lp-ns"}: 1, {"CPU", "sse-ns"}: 3,
		}, true, nil},
		{"smoke: half the floor", map[key]float64{
			{"Req", "ns/op"}: 40, {"Floor", "ns/op"}: 100, {"Events", "events/s"}: 190, {"Events", "floor-events/s"}: 100,
			{"Allocs", "allocs/op"}: 40, {"Floor", "allocs/op"}: 100, {"CPU", "lp-ns"}: 1, {"CPU", "sse-ns"}: 3,
		}, true, nil},
	} {
		failed := check(rows, tc.med, tc.smoke)
		var got []string
		for _, f := range failed {
			if !strings.Contains(f, "is not a floor") {
				t.Errorf("%s: %s", tc.name, f)
				continue
			}
			got = append(got, f[:strings.Index(f, ":")])
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: refused %v, want %v\n%s", tc.name, got, tc.want, strings.Join(failed, "\n"))
		}
	}
}
