#!/usr/bin/env bash
# ra-cache-config=FILE: values from the file apply, the command line
# overrides the file wherever it stands, and every kind of bad input
# stops nbdkit with one message naming the file, the line and the key.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
filter=$FILTER d=$tmpdir

effective () {  # effective ARGS...: the configuration line nbdkit logs
  nbdkit -fv -U - --filter="$filter" memory 1M "$@" --run true 2>&1 |
    grep -o 'ra-cache: config: .*' || true
}

cat > "$d/good.conf" <<'CONF'
# comment
ra-max = "8M";
ra-io-max = 262144;
ra-max-background = 4;
ra-congestion = "wait";
CONF
line=$(effective ra-cache-config="$d/good.conf")
[[ $line == *"ra-max=8388608 "* ]] || fail "file ra-max not applied: $line"
[[ $line == *"ra-io-max=262144 "* ]] || fail "file ra-io-max not applied: $line"
[[ $line == *"ra-max-background=4 "* ]] || fail "file ra-max-background: $line"
[[ $line == *"ra-congestion-threshold=3 "* ]] || fail "derived threshold: $line"
[[ $line == *"ra-congestion=wait"* ]] || fail "file ra-congestion: $line"

# The command line overrides the file, before or after it.
line=$(effective ra-max=2M ra-cache-config="$d/good.conf")
[[ $line == *"ra-max=2097152 "* ]] || fail "command line (before) did not override: $line"
line=$(effective ra-cache-config="$d/good.conf" ra-max=1M)
[[ $line == *"ra-max=1048576 "* ]] || fail "command line (after) did not override: $line"
[[ $line == *"ra-io-max=262144 "* ]] || fail "other file keys kept: $line"

# The example file changes nothing that follows another key (issue 23):
# copied, with ra-max-background lowered, it starts, and the threshold
# follows ra-max-background.
sed 's/^ra-max-background = .*/ra-max-background = 8;/' \
  "$top_srcdir/etc/ra-cache.conf" > "$d/example.conf"
grep -q '^ra-max-background = 8;' "$d/example.conf" ||
  fail "etc/ra-cache.conf has no ra-max-background line to change"
line=$(effective ra-cache-config="$d/example.conf")
[[ $line == *"ra-max-background=8 "* ]] ||
  fail "the example file with ra-max-background = 8 did not start: $line"
[[ $line == *"ra-congestion-threshold=6 "* ]] ||
  fail "the example file's threshold did not follow ra-max-background: $line"
# "auto" on the command line overrides a number in the file.
printf 'ra-congestion-threshold = 2;\n' > "$d/thresh.conf"
line=$(effective ra-cache-config="$d/thresh.conf")
[[ $line == *"ra-congestion-threshold=2 "* ]] || fail "file threshold 2: $line"
line=$(effective ra-cache-config="$d/thresh.conf" ra-congestion-threshold=auto)
[[ $line == *"ra-congestion-threshold=9 "* ]] || fail "command line auto: $line"

# ra-backend-connections: a number or "auto" (1 for the memory plugin,
# which runs requests in parallel), in the file and on the command line.
line=$(effective)
[[ $line == *"ra-backend-connections=1 "* ]] || fail "default connections: $line"
printf 'ra-backend-connections = "auto";\n' > "$d/auto.conf"
line=$(effective ra-cache-config="$d/auto.conf")
[[ $line == *"ra-backend-connections=1 "* ]] || fail "file auto: $line"
line=$(effective ra-cache-config="$d/auto.conf" ra-backend-connections=3)
[[ $line == *"ra-backend-connections=3 "* ]] || fail "command line 3: $line"
printf 'ra-backend-connections = 5;\n' > "$d/five.conf"
line=$(effective ra-cache-config="$d/five.conf" ra-backend-connections=auto)
[[ $line == *"ra-backend-connections=1 "* ]] || fail "command line auto: $line"

expect_error () {  # expect_error REGEX ARGS...
  local want=$1; shift
  local out
  if out=$(nbdkit -U - --filter="$filter" memory 1M "$@" --run true 2>&1); then
    fail "nbdkit started with $*"
  fi
  echo "$out" | grep -qE "$want" || fail "expected /$want/ for $*, got: $out"
  echo "ok: $(echo "$out" | head -1)"
}

bad () { printf '%b' "$2" > "$d/$1.conf"; }
bad unknown 'ra-max = "8M";\nra-maximum = 3;\n'
expect_error "unknown.conf:2: ra-maximum: unknown key" ra-cache-config="$d/unknown.conf"
bad type 'ra-max-background = "many";\n'
expect_error "type.conf:1: ra-max-background: wrong type" ra-cache-config="$d/type.conf"
bad conns 'ra-backend-connections = "many";\n'
expect_error 'conns.conf:1: ra-backend-connections: wrong type: expected an integer or "auto"' ra-cache-config="$d/conns.conf"
bad float 'ra-max = 8.5;\n'
expect_error "float.conf:1: ra-max: wrong type" ra-cache-config="$d/float.conf"
bad range '\n\nra-max-background = 1000;\n'
expect_error "range.conf:3: ra-max-background: 1000 is out of range: 1 to 256" ra-cache-config="$d/range.conf"
bad pow2 'ra-cache-page-size = 3000;\n'
expect_error "pow2.conf:1: ra-cache-page-size: 3000 is out of range: a power of two from 512 to 1M" ra-cache-config="$d/pow2.conf"
bad suffix 'ra-max = "8Q";\n'
expect_error "suffix.conf:1: ra-max: '8Q' is not a size" ra-cache-config="$d/suffix.conf"
bad enum 'ra-congestion = "sometimes";\n'
expect_error "enum.conf:1: ra-congestion: 'sometimes' is not one of: skip, wait" ra-cache-config="$d/enum.conf"
bad syntax 'ra-max = "8M"\nra-io-max = ;\n'
expect_error "syntax.conf:[0-9]+: syntax error" ra-cache-config="$d/syntax.conf"
expect_error "nonexistent.conf: cannot read the configuration file" ra-cache-config="$d/nonexistent.conf"
chmod 000 "$d/unknown.conf"
if [ "$(id -u)" -ne 0 ]; then
  expect_error "unknown.conf: cannot read the configuration file" ra-cache-config="$d/unknown.conf"
fi
# Command line errors too.
expect_error "ra-cache-page-size: 3000 is out of range: a power of two" ra-cache-page-size=3000
expect_error "ra-io-max: 100 is out of range: one page to 32M" ra-io-max=100
expect_error "ra-max: .* is larger than half of ra-cache-size" ra-max=512M
expect_error "ra-congestion-threshold: 13 must be from 1 to ra-max-background" ra-congestion-threshold=13
expect_error "ra-max: .* is not a whole number of pages" ra-max=5000
expect_error "ra-backend-connections: 'two' is not a whole number or auto" ra-backend-connections=two
expect_error "ra-backend-connections: 300 is out of range: 0 to 256, or auto" ra-backend-connections=300
info PASS
