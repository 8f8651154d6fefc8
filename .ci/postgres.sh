# Sourced by .ci/run (bash, set -euo pipefail): starts a throw-away PostgreSQL
# server on 127.0.0.1 and exports POPPY_TEST_POSTGRES_URL for the tests of
# keystore/pgstore. Needs Debian's postgresql package installed. As root the
# server runs as the postgres user (initdb refuses root); as anyone else it
# runs as that user. The server is stopped and its data directory removed when
# the sourcing shell exits.
#
# It can also be sourced by hand to run the PostgreSQL tests locally:
#   source .ci/postgres.sh && go test ./keystore/pgstore/

poppy_pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$poppy_pg_bin" ] || [ ! -x "$poppy_pg_bin/initdb" ]; then
  echo "postgres.sh: no PostgreSQL binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2
  return 1
fi

# As root the directory must be one the postgres user can reach: /tmp, not
# a TMPDIR that may be under /root.
if [ "$(id -u)" = 0 ]; then poppy_pg_base=/tmp; else poppy_pg_base=${TMPDIR:-/tmp}; fi
poppy_pg_dir=$(mktemp -d "$poppy_pg_base/poppy-pg.XXXXXX")
poppy_pg_data="$poppy_pg_dir/data"
poppy_pg_log="$poppy_pg_dir/postgres.log"

# poppy_pg_as runs a command as the server's owner, from a directory that user
# can read (the work tree may not be readable by postgres).
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$poppy_pg_dir"
  chmod 0700 "$poppy_pg_dir"
  poppy_pg_as() { (cd "$poppy_pg_dir" && runuser -u postgres -- "$@"); }
else
  poppy_pg_as() { (cd "$poppy_pg_dir" && "$@"); }
fi

poppy_pg_stop() {
  if [ -f "$poppy_pg_data/postmaster.pid" ]; then
    poppy_pg_as "$poppy_pg_bin/pg_ctl" -D "$poppy_pg_data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$poppy_pg_dir"
}
trap poppy_pg_stop EXIT

# Throw-away cluster: trust authentication, reachable only on loopback and on
# a socket inside the temporary directory.
poppy_pg_as "$poppy_pg_bin/initdb" -D "$poppy_pg_data" -U postgres \
  --auth=trust --encoding=UTF8 --no-locale >"$poppy_pg_dir/initdb.log" 2>&1 || {
  cat "$poppy_pg_dir/initdb.log" >&2
  return 1
}

# poppy_pg_port_free reports whether nothing accepts connections on the port.
poppy_pg_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Pick a free port and start; if another process takes the port between the
# check and the start, try another one.
poppy_pg_port=""
for poppy_pg_try in 1 2 3 4 5 6 7 8 9 10; do
  poppy_pg_candidate=$((20000 + RANDOM % 30000))
  poppy_pg_port_free "$poppy_pg_candidate" || continue
  # max_connections: the two-process tests and benchmarks open up to ~120.
  if poppy_pg_as "$poppy_pg_bin/pg_ctl" -D "$poppy_pg_data" -l "$poppy_pg_log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $poppy_pg_candidate -c unix_socket_directories=$poppy_pg_dir -c max_connections=300" \
    start >/dev/null; then
    poppy_pg_port=$poppy_pg_candidate
    break
  fi
done
if [ -z "$poppy_pg_port" ]; then
  echo "postgres.sh: could not start PostgreSQL on a free port" >&2
  cat "$poppy_pg_log" >&2 || true
  return 1
fi

# Wait until it accepts TCP connections on loopback, then create the database.
for poppy_pg_try in $(seq 1 60); do
  if "$poppy_pg_bin/pg_isready" -q -h 127.0.0.1 -p "$poppy_pg_port"; then break; fi
  sleep 0.5
done
"$poppy_pg_bin/pg_isready" -h 127.0.0.1 -p "$poppy_pg_port" >/dev/null || {
  echo "postgres.sh: PostgreSQL did not become ready on 127.0.0.1:$poppy_pg_port" >&2
  cat "$poppy_pg_log" >&2 || true
  return 1
}
poppy_pg_as "$poppy_pg_bin/createdb" -h 127.0.0.1 -p "$poppy_pg_port" -U postgres poppy_test

export POPPY_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$poppy_pg_port/poppy_test?sslmode=disable"
echo "PostgreSQL $("$poppy_pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$poppy_pg_port (POPPY_TEST_POSTGRES_URL)"
