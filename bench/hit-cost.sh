#!/usr/bin/env bash
# Instructions per 4 KiB cache hit, counted by callgrind (repeatable: it
# counts instructions, not time).  Usage: bench/hit-cost.sh [BUILDDIR]
set -euo pipefail
b=${1:-build}
prog=$b/bench/hit-cost
[ -x "$prog" ] || { echo "build it first: make -C $b bench/hit-cost" >&2; exit 1; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
run () {  # run N: instructions in hit_loop for N hits
  valgrind --tool=callgrind --callgrind-out-file="$d/cg.$1" \
    --toggle-collect='hit_loop*' "$prog" "$1" >/dev/null 2>&1
  callgrind_annotate "$d/cg.$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
}
a=$(run 20000); z=$(run 40000)
echo "instructions per 4 KiB hit: $(( (z - a) / 20000 ))  (hit loop of 20000: $a, of 40000: $z)"
callgrind_annotate --inclusive=yes "$d/cg.40000" 2>/dev/null | sed -n '/Ir/,$p' | head -25
