#!/usr/bin/env bash
# poppy fake --run with an agent written in another language
# (testdata/node-agent, Node with no npm package): a clean run must pass,
# and a run with one deliberate mistake (a DPoP proof for another URL)
# must fail naming its rule, PA-4.3-08, in the JUnit report and the JSON
# lines. Run from the repository's root by .ci/run; needs go and node.
set -euo pipefail

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/poppy" ./cmd/poppy
free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
passed=0 failed=0

port=$(free_port)
if timeout 300 "$dir/poppy" fake --agent "agent.test=http://127.0.0.1:$port" --sign-in.device-interval 1s \
  --junit "$dir/clean.xml" --run-timeout 240s --run -- node testdata/node-agent/agent.mjs "$port"; then
  echo "ok: the clean Node agent passed"; passed=$((passed + 1))
else
  echo "FAIL: the clean Node agent failed (exit $?)"; failed=$((failed + 1))
fi

port=$(free_port)
status=0
AGENT_MISTAKE=htu timeout 300 "$dir/poppy" fake --json --agent "agent.test=http://127.0.0.1:$port" \
  --junit "$dir/mistake.xml" --run-timeout 240s --run -- node testdata/node-agent/agent.mjs "$port" >"$dir/mistake.json" || status=$?
if [ "$status" = 1 ] && grep -q '<testcase name="PA-4.3-08"' "$dir/mistake.xml" &&
  grep -q '"event":"violation".*"rule":"PA-4.3-08"\|"rule":"PA-4.3-08".*"event":"violation"' "$dir/mistake.json"; then
  echo "ok: the deliberate mistake was found as PA-4.3-08"; passed=$((passed + 1))
else
  echo "FAIL: the deliberate mistake (exit $status) was not found as PA-4.3-08"; cat "$dir/mistake.xml" "$dir/mistake.json" || true
  failed=$((failed + 1))
fi

echo "poppy fake --run: $passed passed, $failed failed"
[ "$failed" = 0 ]
