#!/usr/bin/env bash
# The filter's --help text, the man page and etc/ra-cache.conf must name
# the same set of keys with the same defaults.
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
filter=$FILTER srcdir=$top_srcdir d=$tmpdir

nbdkit --filter="$filter" null --help > "$d/help.txt"
/usr/bin/python3 - "$d/help.txt" "$srcdir/plugins/ra-cache/nbdkit-ra-cache-filter.pod" \
    "$srcdir/etc/ra-cache.conf" <<'PY'
import re, sys
help_txt, pod, conf = (open(f).read() for f in sys.argv[1:4])

def norm(v):
    v = v.strip().strip('"').rstrip('.;:,')
    return {"0 = never": "0"}.get(v, v)

# --help: "key=VALUE   text (default D ..." possibly on the next line.
help_keys = {}
lines = help_txt.splitlines()
for i, line in enumerate(lines):
    m = re.match(r'^(ra-[a-z-]+)=', line)
    if not m or m.group(1) == "ra-cache-config":
        continue
    text = line + " " + (lines[i + 1] if i + 1 < len(lines) else "")
    d = re.search(r'\(default ([^;,)]+)', text)
    help_keys[m.group(1)] = norm(d.group(1)) if d else None

# man page: =item B<key=...> followed by a paragraph with "Default C<D>"
# or "Default: none"; consecutive =items share a paragraph.
pod_keys = {}
pending = []
for block in re.split(r'\n(?==item )', pod):
    m = re.match(r'=item B<(ra-[a-z-]+)=', block)
    if not m:
        continue
    pending.append(m.group(1))
    d = re.search(r'Default(?: C<([^>]+)>|: (none))', block)
    if d:
        for k in pending:
            if k != "ra-cache-config":
                pod_keys[k] = norm(d.group(1) or d.group(2))
        pending = []
    elif len(block.strip().splitlines()) > 2:
        for k in pending:
            if k != "ra-cache-config":
                pod_keys[k] = None
        pending = []

# etc/ra-cache.conf: "key = value;" or, for keys unset by default,
# a commented "# key = example;" after "Default: none".
conf_keys = {}
for m in re.finditer(r'^(#\s*)?(ra-[a-z-]+)\s*=\s*([^;]+);', conf, re.M):
    conf_keys[m.group(2)] = "none" if m.group(1) else norm(m.group(3))

ok = True
for name, keys in (("man page", pod_keys), ("etc/ra-cache.conf", conf_keys)):
    if set(keys) != set(help_keys):
        print("FAIL: keys differ between --help and %s:" % name)
        print("  only in --help:", sorted(set(help_keys) - set(keys)))
        print("  only in %s:" % name, sorted(set(keys) - set(help_keys)))
        ok = False
for k in sorted(help_keys):
    vals = (help_keys.get(k), pod_keys.get(k), conf_keys.get(k))
    if None in vals or len(set(vals)) != 1:
        print("FAIL: %s: defaults differ: --help %r, man page %r, conf %r" % ((k,) + vals))
        ok = False
print("%d keys checked" % len(help_keys))
sys.exit(0 if ok and len(help_keys) >= 10 else 1)
PY
