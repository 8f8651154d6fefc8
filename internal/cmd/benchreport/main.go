// Command benchreport runs the root package's performance benchmarks and
// writes docs/performance.md from their output: each figure beside its floor
// measured in the same run, the ratio, the goal, the machine and the date,
// with the benchstat summary (golang.org/x/perf/cmd/benchstat, pinned as a
// go tool in internal/tools/go.mod) of the raw output.
//
// Run it from the root of the tree (a module of its own, in go.work):
//
//	go run ./internal/cmd/benchreport            # full run, rewrites docs/performance.md
//	go run ./internal/cmd/benchreport -smoke     # a short run that checks ratios, writes nothing
//
// -smoke (which .ci/run uses) runs each benchmark once with few Sessions
// and fails when a figure is off its floor by far more than noise could
// explain: it checks that the benchmarks still run and still measure what
// they name, not how fast this machine is.
//
// A floor does no more work than what it bounds: a full run refuses any
// row whose figure costs less than 0.95× its floor, and writes nothing,
// but for the rows that compare two figures rather than a figure and its
// floor (the CPU of long polls against streams). -smoke, whose samples
// are single, does not.
//
// The report's "Build cost" section (the cold build of the default poppy
// and of the tree's tests, before and after a change) is written by
// buildcost.sh beside this file, and kept as it is here.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchfmt"
)

// row is one line of the report: a figure and the floor it is measured
// against.
type row struct {
	figure, floor string // benchmark names without "Benchmark"
	unit          string // the unit compared
	what, goal    string
	// goalRatio is the ratio the goal allows (0: the goal is not a ratio);
	// smokeRatio the ratio beyond which -smoke fails.
	goalRatio, smokeRatio float64
	// diff: compare figure-floor instead of figure/floor (allocations).
	diff bool
	// abs: the goal is an absolute bound on the figure in unit (no floor).
	abs float64
	// pkg is the package of the benchmark, "." when empty: a directory,
	// or "once:dir" (one iteration), or "label:dir" for a run of its own
	// with benchtimes[pkg].
	pkg string
	// floorUnit, when set, is the floor's unit: with floor == figure, a
	// figure and its floor timed side by side in one benchmark.
	floorUnit string
	// rate: the unit is a rate, higher is better (events/s); -smoke fails
	// when the figure is below its floor divided by smokeRatio, and a rate
	// with no floor only needs to be above 0.
	rate bool
	// atLeast: the goal is a lower bound on the figure in unit.
	atLeast float64
	// compare: the floor is a figure to compare with, which may cost more
	// than the figure (the CPU of a long poll against a stream's), not a
	// floor: check does not hold it to floorGuard.
	compare bool
}

// benchtimes are the -benchtime of packages other than the root, full and
// -smoke; the sqlitestore default counts updates per iteration. A row's
// pkg may name a run of its own in a package, "label:dir": its benchmarks
// run in one go test of dir, with the label's benchtime.
var benchtimes = map[string][2]string{
	// Events per iteration: enough in -smoke for a rate (the benchmarks
	// call a figure from fewer than 1,000 events implausible); the reads
	// per second are watched for 2 s whatever the count.
	"./conversation": {"1s", "2000x"},
	// The event throughput, in memory and with the cursor in SQLite,
	// beside its floor, and the CPU per event of long polls and streams,
	// in one run of the sqlitestore module's benchmarks
	// (internal/testenv/convbench): events per iteration (per reader of
	// the interleaved ones, which read rounds of 2,000 in turn), as above.
	"events:./keystore/sqlitestore": {"1s", "2000x"},
	// One request or Session start per iteration, compared with its floor
	// run in the same benchmark or beside it: a single iteration (the
	// root's -smoke default) is one sample, which a pause of the shared
	// machine can make several times its floor; 300 make the check a
	// check of the code.
	"requests:.": {"1s", "300x"},
}

var rows = []row{
	{figure: "SessionRequestInterleaved", floor: "SessionRequestInterleaved", unit: "sdk-ns/req", floorUnit: "floor-ns/req", pkg: "requests:.",
		what: "API request through Session.Transport() vs plain request + one ES256 signature, same server, timed alternately in one benchmark", goal: "≤ 1.05×", goalRatio: 1.05, smokeRatio: 3},
	{figure: "SessionRequest", floor: "FloorPlainRequestPlusSign", unit: "ns/op", pkg: "requests:.",
		what: "the same, as two benchmarks run one after the other (drifts with the machine's load)", goal: "≤ 1.05×", goalRatio: 1.05, smokeRatio: 4},
	{figure: "SessionRequest", floor: "FloorPlainRequestPlusSign", unit: "allocs/op", diff: true, pkg: "requests:.",
		what: "allocations per API request beyond the floor's", goal: "≤ 5", goalRatio: 5, smokeRatio: 20},
	{figure: "SessionOverhead", floor: "FloorSign", unit: "ns/op", pkg: "requests:.",
		what: "the transport's own work per request (stub network) vs one ES256 signature", goal: "—", smokeRatio: 4},
	{figure: "IdleSessionMemory", unit: "B/session", abs: 4096, pkg: "once:.",
		what: "heap per idle Session, SDK's share", goal: "≤ 4 KiB", smokeRatio: 16384},
	{figure: "RenewOneSession1000", floor: "FloorRenewOne", unit: "ns/op",
		what: "1,000 goroutines on one expired token (exactly 1 token request, asserted) vs one renewal", goal: "exactly 1 request", smokeRatio: 10},
	{figure: "Renew1000Sessions", floor: "FloorRenewOne", unit: "ns/renewal",
		what: "1,000 Sessions renewed at once, per renewal (exactly 1,000 requests, more than one in flight, asserted) vs one renewal alone", goal: "exactly 1,000 requests, no lock across the network", smokeRatio: 10},
	{figure: "CompanyCached", floor: "FloorMapLookup", unit: "ns/op", abs: 1000,
		what: "resolving a cached Company (0 requests, asserted) vs a map lookup under a mutex", goal: "0 requests, ≤ 1 µs", smokeRatio: 1e4},
	{figure: "SessionStartInterleaved", floor: "SessionStartInterleaved", unit: "start-ns/op", floorUnit: "floor-ns/op", pkg: "requests:.",
		what: "Session start (JWT bearer grant, first token) vs the token request alone (one POST + two signatures), timed alternately in one benchmark", goal: "≤ 1.1×", goalRatio: 1.1, smokeRatio: 5},
	{figure: "SessionStart", floor: "FloorRenewOne", unit: "ns/op", pkg: "requests:.",
		what: "Session start (JWT bearer grant, first token) vs the token request alone (one POST + two signatures)", goal: "≤ 1.1×", goalRatio: 1.1, smokeRatio: 5},
	{figure: "EventsSSEInterleaved", floor: "EventsSSEInterleaved", unit: "events/s", floorUnit: "floor-events/s", rate: true, pkg: "events:./keystore/sqlitestore",
		what: "conversation events read through Events from an SSE stream, in-memory keystore, vs a bare net/http read of the same stream (lines split, no JSON, no de-duplication, no cursor), the fake appending them as fast as it takes them, timed alternately in one benchmark", goal: "≥ 0.85×", goalRatio: 0.85, smokeRatio: 5},
	{figure: "EventsSSECatchUpInterleaved", floor: "EventsSSECatchUpInterleaved", unit: "events/s", floorUnit: "floor-events/s", rate: true, pkg: "events:./keystore/sqlitestore",
		what: "the same, the events waiting before each round starts (an agent catching up): the readers' work, not the pace of the fake's making events, bounds both", goal: "report", smokeRatio: 10},
	{figure: "EventsSSESQLiteInterleaved", floor: "EventsSSESQLiteInterleaved", unit: "events/s", floorUnit: "floor-events/s", rate: true, pkg: "events:./keystore/sqlitestore",
		what: "the first, durable: the cursor saved in SQLite on disk by the default checkpoint policy (each burst, at most 256 events or 1 s apart), timed alternately with the bare read in one benchmark", goal: "≥ 0.5×", goalRatio: 0.5, smokeRatio: 20},
	// The durable read, as benchmarks of their own (one loop for all their
	// events): absolute figures. Against a floor run before or after them
	// they would drift with the machine's load, as BenchmarkEventsSSE
	// and BenchmarkFloorBareSSE do (not reported).
	{figure: "EventsSSESQLite", unit: "events/s", rate: true, atLeast: 20000, pkg: "events:./keystore/sqlitestore",
		what: "the durable one, as a benchmark of its own (one Events loop)", goal: "≥ 20,000 events/s", smokeRatio: 1},
	{figure: "EventsSSESQLiteEachEvent", unit: "events/s", rate: true, pkg: "events:./keystore/sqlitestore",
		what: "the same, with a checkpoint (one SQLite commit) after every event (`Checkpoint{Events: 1}`)", goal: "report events/s", smokeRatio: 1},
	{figure: "UnknownEventsSQLite", unit: "events/s", rate: true, pkg: "events:./keystore/sqlitestore",
		what: "pages of 100 events of an unknown type, skipped (PA-7.5-04), cursor in SQLite, by long poll", goal: "one commit per page, not per event", smokeRatio: 1},
	{figure: "CPUPerEvent", floor: "CPUPerEvent", unit: "lp-cpu-ns/event", floorUnit: "sse-cpu-ns/event", compare: true, pkg: "events:./keystore/sqlitestore",
		what: "CPU per event of an agent (a process of its own) catching up by long poll, pages of 1,000 events, vs one catching up by SSE, timed alternately in one benchmark", goal: "≤ 2×", goalRatio: 2, smokeRatio: 10},
	{figure: "CPUPerEventPages100", floor: "CPUPerEventPages100", unit: "lp-cpu-ns/event", floorUnit: "sse-cpu-ns/event", compare: true, pkg: "events:./keystore/sqlitestore",
		what: "the same, pages of 100 events (the fake's default): a request (a proof, an HTTP/2 exchange, the process woken) per 100 events", goal: "report", smokeRatio: 20},
	{figure: "IdleReads", unit: "reads/s", abs: 5, pkg: "./conversation",
		what: "reads per second of an idle Events loop against a Company that answers each long poll after 1 ms (MaxWait), after a conversation turn, over 2 s: the highest of four loops, by stream request and by long poll, each with the fake's answers and with the turn's events again under a new cursor each time", goal: "≤ 5 reads/s", smokeRatio: 20},
	{figure: "StuckCursorReads", unit: "reads", abs: 5, pkg: "./conversation",
		what: "reads sent to a Company answering has_more: true with no events and the same cursor, before the loop ends with ErrProtocol (asserted, within 10 s)", goal: "5 reads, then a typed error", smokeRatio: 5},
	{figure: "UpdateTwoProcesses", unit: "updates/s", pkg: "./keystore/sqlitestore",
		what: "keystore Update on SQLite, 8 goroutines in each of 2 processes on separate records, another User's lock held throughout (no Update waits on it, asserted)", goal: "report updates/s", smokeRatio: 1e9},
}

func main() {
	smoke := flag.Bool("smoke", false, "run briefly and check ratios; write nothing")
	count := flag.Int("count", 6, "runs of each benchmark")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime")
	sessions := flag.Int("sessions", 100000, "Sessions held by BenchmarkIdleSessionMemory (run once: the figure varies little)")
	out := flag.String("out", "docs/performance.md", "report to write")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchreport: ")

	if *smoke {
		*count, *benchtime, *sessions = 1, "1x", 200
	}
	byPkg := map[string][]string{}
	for _, r := range rows {
		pkg := r.pkg
		if pkg == "" {
			pkg = "."
		}
		byPkg[pkg] = append(byPkg[pkg], r.figure)
		if r.floor != "" {
			byPkg[pkg] = append(byPkg[pkg], r.floor)
		}
	}
	var raw bytes.Buffer
	for _, pkg := range slices.Sorted(maps.Keys(byPkg)) {
		names := byPkg[pkg]
		slices.Sort(names)
		names = slices.Compact(names)
		bt, n, dir := *benchtime, *count, pkg
		switch {
		case strings.HasPrefix(pkg, "once:"):
			// One iteration of many Sessions: the heap figure is steady.
			bt, n, dir = "1x", 1, strings.TrimPrefix(pkg, "once:")
		case benchtimes[pkg] != [2]string{}:
			if _, d, ok := strings.Cut(pkg, ":"); ok {
				dir = d
			}
			bt = benchtimes[pkg][0]
			if *smoke {
				bt = benchtimes[pkg][1]
			}
		case pkg != ".":
			// Updates are counted per iteration, not timed per call.
			bt = "200x"
			if *smoke {
				bt = "20x"
			}
		}
		args := []string{"test", "-run", "^$", "-bench", "^Benchmark(" + strings.Join(names, "|") + ")$", "-benchmem",
			"-count", strconv.Itoa(n), "-benchtime", bt, "-timeout", "60m", dir}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "POPPY_BENCH_SESSIONS="+strconv.Itoa(*sessions))
		cmd.Stdout = io.MultiWriter(&raw, os.Stderr)
		cmd.Stderr = os.Stderr
		log.Printf("go %s", strings.Join(args, " "))
		if err := cmd.Run(); err != nil {
			log.Fatalf("benchmarks failed: %v", err)
		}
	}

	med, err := medians(raw.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	failed := check(rows, med, *smoke)
	if len(failed) > 0 {
		log.Fatalf("figures out of range:\n  %s", strings.Join(failed, "\n  "))
	}
	if *smoke {
		log.Printf("smoke check passed (%d rows)", len(rows))
		return
	}

	tmp, err := os.CreateTemp("", "bench-*.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw.Bytes()); err != nil {
		log.Fatal(err)
	}
	tmp.Close()
	stat, err := exec.Command("go", "tool", "benchstat", tmp.Name()).CombinedOutput()
	if err != nil {
		log.Fatalf("benchstat: %v\n%s", err, stat)
	}
	stat = bytes.ReplaceAll(stat, []byte(tmp.Name()), []byte("bench.txt"))

	var b strings.Builder
	b.WriteString("# Performance\n\n")
	b.WriteString("<!-- Generated by `go run ./internal/cmd/benchreport`; do not edit. -->\n\n")
	fmt.Fprintf(&b, "Measured %s on %s (%s/%s, %d CPUs, %s), `-count %d -benchtime %s`, %d Sessions held for the memory figure. The memory figure is one run; every other figure is the median of its runs, beside a floor measured in the same run, and the ratio of a figure timed alternately with its floor in one benchmark is the median of its runs' ratios; the machine is shared, so compare ratios, not absolute times.\n\n",
		time.Now().UTC().Format("2006-01-02"), cpuOf(raw.Bytes()), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), *count, *benchtime, *sessions)
	b.WriteString("| Figure | Value | Floor | Ratio | Goal |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fig, ok := med[key{r.figure, r.unit}]
		if !ok {
			fmt.Fprintf(&b, "| %s | not measured here (see below) | | | %s |\n", r.what, r.goal)
			continue
		}
		floor, ratio := "—", "—"
		if r.floor != "" {
			fl, _ := floorOf(med, r)
			fu := r.unit
			if r.floorUnit != "" {
				fu = r.floorUnit
			} else if r.unit == "ns/renewal" {
				fu = "ns/op"
			}
			floor = fmt.Sprintf("%s %s (`%s`)", num(fl), fu, r.floor)
			if r.diff {
				ratio = fmt.Sprintf("+%s", num(fig-fl))
			} else {
				ratio = fmt.Sprintf("%.2f×", ratioOf(med, r, fig, fl))
			}
		} else if r.abs > 0 {
			ratio = fmt.Sprintf("%.2f× the goal", fig/r.abs)
		} else if r.atLeast > 0 {
			ratio = fmt.Sprintf("%.2f× the goal", fig/r.atLeast)
		}
		if r.floor != "" && r.abs > 0 {
			ratio += fmt.Sprintf(" (%.2f× the goal)", fig/r.abs)
		}
		if r.floor != "" && r.atLeast > 0 {
			ratio += fmt.Sprintf(" (%.2f× the goal)", fig/r.atLeast)
		}
		fmt.Fprintf(&b, "| %s | %s %s (`%s`) | %s | %s | %s |\n", r.what, num(fig), r.unit, r.figure, floor, ratio, r.goal)
	}
	b.WriteString("\nThe benchmarks are in the root package (`bench_test.go`, `bench_renew_test.go`), in `conversation` (`bench_test.go`) and in `keystore/sqlitestore` (`events_bench_test.go`, which runs conversation's event throughput in memory, with the cursor in SQLite and the floor in one run, and `multiproc_bench_test.go`), a module of its own. Run them yourself with\n`go test -run '^$' -bench . -benchmem -count 6 .` (or `./conversation`, `./keystore/sqlitestore`) and compare with `go tool benchstat`. For rates (events/s), the ratio is the figure over its floor: higher is better. No figure costs less than 0.95× its floor (benchreport refuses the run otherwise), but the CPU of long polls, compared with streams'.\n\n")
	// The build cost section (buildcost.sh writes it) is kept as it is.
	if old, err := os.ReadFile(*out); err == nil {
		b.WriteString(section(string(old), "## Build cost"))
	}
	b.WriteString("## benchstat\n\n```\n")
	b.Write(stat)
	b.WriteString("```\n")
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", *out)
}

type key struct{ name, unit string }

// A floor does no more work than what it bounds: a figure that costs
// less than its floor by more than noise says the floor is not one (it
// does work the figure does not, or the two were measured under another
// load), and the row would report a ratio that means nothing. A full run
// refuses a row whose figure costs less than floorGuard times its floor's.
// -smoke does not: its single samples (a floor of one iteration among
// them) are noisier than that.
const floorGuard = 0.95

// ratioOf is r's figure over its floor: the median of the ratio a
// benchmark that times the two alternately reports for each run (its
// "ratio" metric), which the machine's load, drifting between runs, moves
// less than the ratio of the two medians; else fig/fl.
func ratioOf(med map[key]float64, r row, fig, fl float64) float64 {
	if r.floor == r.figure && r.floorUnit != "" {
		if v, ok := med[key{r.figure, "ratio"}]; ok && v > 0 {
			return v
		}
	}
	return fig / fl
}

// costRatio is what r's figure costs over what its floor costs, given
// ratioOf: the ratio, or its inverse for a rate (events/s: more is
// cheaper).
func costRatio(r row, ratio float64) float64 {
	if r.rate {
		return 1 / ratio
	}
	return ratio
}

// check returns what is wrong with the figures med holds for rows: a
// figure missing, implausible or off its floor by more than -smoke
// allows (smokeRatio), and, but with smoke, a row whose floor costs more
// than the figure (floorGuard).
func check(rows []row, med map[key]float64, smoke bool) []string {
	var failed []string
	for _, r := range rows {
		fig, ok := med[key{r.figure, r.unit}]
		if !ok {
			if r.smokeRatio == 0 {
				continue // not measured by this package (see the report)
			}
			failed = append(failed, fmt.Sprintf("%s: no %s figure", r.figure, r.unit))
			continue
		}
		if r.floor == "" {
			if fig <= 0 || (!r.rate && fig > r.smokeRatio) {
				failed = append(failed, fmt.Sprintf("%s: %g %s is implausible", r.figure, fig, r.unit))
			}
			continue
		}
		fl, ok := floorOf(med, r)
		if !ok || (fl <= 0 && !r.diff) {
			failed = append(failed, fmt.Sprintf("%s: no floor %s in %s", r.figure, r.unit, r.floor))
			continue
		}
		switch {
		case r.diff:
			if fig-fl > r.smokeRatio {
				failed = append(failed, fmt.Sprintf("%s: %g %s beyond the floor", r.figure, fig-fl, r.unit))
			}
		case r.rate:
			if fig <= 0 || fl/fig > r.smokeRatio {
				failed = append(failed, fmt.Sprintf("%s: %g %s, 1/%.0f of its floor %s", r.figure, fig, r.unit, fl/fig, r.floor))
				continue
			}
		case fig/fl > r.smokeRatio:
			failed = append(failed, fmt.Sprintf("%s: %.2f× its floor %s", r.figure, fig/fl, r.floor))
		}
		if smoke || r.compare || fl <= 0 || fig <= 0 {
			continue
		}
		if c := costRatio(r, ratioOf(med, r, fig, fl)); c < floorGuard {
			failed = append(failed, fmt.Sprintf("%s: costs %.2f× its floor %s (%s %s against %s), below %.2f×: a floor that costs more than what it bounds is not a floor", r.figure, c, r.floor, num(fig), r.unit, num(fl), floorGuard))
		}
	}
	return failed
}

// floorOf returns the floor's figure for r.
func floorOf(med map[key]float64, r row) (float64, bool) {
	if r.floorUnit != "" {
		v, ok := med[key{r.floor, r.floorUnit}]
		return v, ok
	}
	if v, ok := med[key{r.floor, r.unit}]; ok {
		return v, true
	}
	if r.unit == "ns/renewal" {
		v, ok := med[key{r.floor, "ns/op"}]
		return v, ok
	}
	return 0, false
}

var procs = regexp.MustCompile(`-[0-9]+$`)

// medians returns the median of every benchmark's figures by unit, in the
// units go test prints.
func medians(raw []byte) (map[key]float64, error) {
	vals := map[key][]float64{}
	rd := benchfmt.NewReader(bytes.NewReader(raw), "bench.txt")
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		name := procs.ReplaceAllString(string(res.Name.Full()), "")
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			vals[key{name, unit}] = append(vals[key{name, unit}], val)
		}
	}
	if err := rd.Err(); err != nil {
		return nil, err
	}
	out := map[key]float64{}
	for k, v := range vals {
		slices.Sort(v)
		if len(v)%2 == 1 {
			out[k] = v[len(v)/2]
		} else {
			out[k] = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
	}
	return out, nil
}

func cpuOf(raw []byte) string {
	for _, l := range strings.Split(string(raw), "\n") {
		if c, ok := strings.CutPrefix(l, "cpu: "); ok {
			return strings.TrimSpace(c)
		}
	}
	return "unknown CPU"
}

func num(f float64) string {
	switch {
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f >= 1:
		return strconv.FormatFloat(f, 'f', 2, 64)
	default:
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
}

// section returns the section of the Markdown text md that starts with the
// line heading, up to the next "## " heading; "" when md has none.
func section(md, heading string) string {
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	sec := md[i+1:]
	if j := strings.Index(sec[len(heading):], "\n## "); j >= 0 {
		sec = sec[:len(heading)+j+1]
	}
	return sec
}
