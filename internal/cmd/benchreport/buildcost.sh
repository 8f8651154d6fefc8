#!/usr/bin/env bash
# Build cost: the cold build of the default poppy command and of the
# tree's tests, before and after a change, measured with public tools
# only (/usr/bin/time -v, go build and go test with an empty build cache),
# written into docs/performance.md's "Build cost" section (benchreport
# keeps that section when it rewrites the file).
#
#   bash internal/cmd/benchreport/buildcost.sh [BEFORE [AFTER]]
#
# BEFORE and AFTER are git revisions (default: 4653b61, the tree before the
# default poppy stopped compiling the OpenAI client, and HEAD). Each is
# exported with git archive into a temporary directory, its modules are
# downloaded into a module cache of the run's own (not timed: that depends
# on the network), then, each with an empty build cache of its own:
#   go build -o poppy ./cmd/poppy                              (the default poppy)
#   go test -count=1 -run '^$' github.com/poppyproto/poppy/...  (every test binary, built and started)
# under /usr/bin/time -v: wall time, and the largest resident set of any
# one process of the build (the compiler on the largest package). Run it on
# a quiet machine: it prints the load average before and after, and the
# figures mean nothing on a loaded one. It takes about as long as four cold
# builds of the tree (tens of minutes on 2 cores).
#
#   bash internal/cmd/benchreport/buildcost.sh --smoke
#
# checks the script itself, quickly: the working tree as it is, with the
# shared caches (so nothing is cold), docs/performance.md left as it is.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

smoke=false
if [ "${1:-}" = --smoke ]; then
  smoke=true
  shift
fi
before=${1:-4653b61}
after=${2:-HEAD}
command -v /usr/bin/time >/dev/null || { echo "buildcost: /usr/bin/time is missing (the Debian package time)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
export GOFLAGS="-buildvcs=false"
if ! $smoke; then
  export GOMODCACHE="$tmp/modcache"
fi

# measure NAME DIR CMD...: runs CMD in DIR under /usr/bin/time -v and
# prints "seconds kilobytes".
measure() {
  local name=$1 dir=$2
  shift 2
  (cd "$dir" && /usr/bin/time -v -o "$tmp/$name.time" "$@" >"$tmp/$name.log" 2>&1) || {
    echo "buildcost: $name failed:" >&2
    tail -20 "$tmp/$name.log" >&2
    exit 1
  }
  awk -F': ' '
    /Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i] }
    /Maximum resident set size/ { kb = $2 }
    END { printf "%.0f %d\n", s, kb }' "$tmp/$name.time"
}

mins() { awk -v s="$1" 'BEGIN { printf "%d min %02d s", s / 60, s % 60 }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f MiB", k / 1024 }'; }

revs=("$before" "$after")
if $smoke; then
  revs=("$after")
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A rows shas
for rev in "${revs[@]}"; do
  shas[$rev]=$(git rev-parse --short "$rev") # once: HEAD may move while this runs
done
for rev in "${revs[@]}"; do
  sha=${shas[$rev]}
  src="$tmp/src-$sha"
  if $smoke; then
    src=$PWD
  else
    mkdir -p "$src"
    git archive "$sha" | tar -x -C "$src"
  fi
  echo "== $rev ($sha): downloading modules (not timed)" >&2
  (cd "$src" && go list -deps -test github.com/poppyproto/poppy/... >/dev/null)
  cache() { if $smoke; then go env GOCACHE; else echo "$tmp/cache-$sha-$1"; fi; }
  echo "== $rev ($sha): cold build of poppy" >&2
  read -r s kb < <(GOCACHE=$(cache poppy) measure "poppy-$sha" "$src" go build -o "$tmp/poppy-$sha" ./cmd/poppy)
  [ -n "${kb:-}" ] || exit 1
  size=$(stat -c %s "$tmp/poppy-$sha")
  rows[$sha]="$(mins "$s")|$(mib "$kb")|$(awk -v b="$size" 'BEGIN { printf "%.1f MB", b / 1e6 }')"
  echo "== $rev ($sha): cold build of the tree's tests" >&2
  kb=
  read -r s kb < <(GOCACHE=$(cache tests) measure "tests-$sha" "$src" go test -count=1 -run '^$' github.com/poppyproto/poppy/...)
  [ -n "${kb:-}" ] || exit 1
  rows[$sha]+="|$(mins "$s")|$(mib "$kb")"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

section=$(mktemp)
{
  echo "## Build cost"
  echo
  echo "<!-- Written by \`bash internal/cmd/benchreport/buildcost.sh\`; benchreport keeps this section. -->"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) CPUs, $(go version | cut -d' ' -f3), load average $load_before before and $load_after after."
  echo "Each build starts from an empty build cache, with the modules already downloaded. Peak memory is the largest resident set of any one process of the build."
  echo
  echo "| Revision | \`poppy\`: cold build | peak memory | binary | tests: cold build | peak memory |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for rev in "${revs[@]}"; do
    sha=${shas[$rev]}
    echo "| \`$sha\` ($rev) | ${rows[$sha]//|/ | } |"
  done
  echo
  echo "The default \`poppy\` leaves out \`poppy ask\`'s OpenAI client since the revision after 4653b61 (\`go install -tags openai ./cmd/poppy\` puts it back); the tests build it in both (module \`llmtools/openai\`). The tests' figure is \`go test -count=1 -run '^$' github.com/poppyproto/poppy/...\`: every test binary built and started, no test run."
  echo
} >"$section"

cat "$section"
if $smoke; then
  echo "buildcost: --smoke: docs/performance.md left as it is" >&2
  exit 0
fi
# Replace the section, or put it before "## benchstat".
awk -v sec="$section" '
  function put() { while ((getline l < sec) > 0) print l; done = 1 }
  /^## Build cost$/ { skip = 1; put(); next }
  skip && /^## / { skip = 0 }
  skip { next }
  /^## benchstat$/ && !done { put() }
  { print }
  END { if (!done) put() }' docs/performance.md >"$tmp/performance.md"
cp "$tmp/performance.md" docs/performance.md
echo "buildcost: wrote docs/performance.md" >&2
