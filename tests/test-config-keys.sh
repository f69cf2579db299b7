#!/usr/bin/env bash
# The one key table (src/config.c, rc_keys), as the filter's --help
# prints it, against the man page, etc/ra-cache.conf and the README's
# table: the same keys, and for each the same default and the same range
# (the table's range text, word for word, in each).
test_needs="nbdkit filter"
. "${top_srcdir:-$(dirname "$0")/..}/tests/functions.sh"
filter=$FILTER srcdir=$top_srcdir d=$tmpdir

nbdkit --filter="$filter" null --help > "$d/help.txt"
/usr/bin/python3 - "$d/help.txt" "$srcdir/plugins/ra-cache/nbdkit-ra-cache-filter.pod" \
    "$srcdir/etc/ra-cache.conf" "$srcdir/README.md" <<'PY'
import re, sys
help_txt, pod, conf, readme = (open(f).read() for f in sys.argv[1:5])

def words(t):
    """Text without POD codes, comment marks, table pipes and line breaks."""
    t = re.sub(r'[A-Z]<([^<>]*)>', r'\1', t)
    t = re.sub(r'^\s*#\s?', '', t, flags=re.M)
    return " ".join(t.replace('`', '').split())

# --help: "key=META  text ... Default DEF; RANGE." up to the next key.
keys = {}
for block in re.findall(r'^(ra-[a-z-]+)=\S*\s+(.*?)(?=^ra-[a-z-]+=|^\s*$|\Z)',
                        help_txt, re.M | re.S):
    key, text = block
    if key == "ra-cache-config":
        continue
    m = re.search(r'Default (\S+); (.*)\.$', words(text))
    if not m:
        print("FAIL: --help: %s: no \"Default DEF; RANGE.\"" % key)
        sys.exit(1)
    keys[key] = m.groups()

ok = True
def fail(msg):
    global ok
    print("FAIL: " + msg)
    ok = False

# man page: the =item blocks of a key up to the next key's.
pod_items = {}
for m in re.finditer(r'^=item B<(ra-[a-z-]+)=.*?(?=^=item B<(?!\1=)|^=back)',
                     pod, re.M | re.S):
    pod_items[m.group(1)] = words(m.group(0))
# etc/ra-cache.conf: the comment above each key, and its line.
conf_items = {}
for m in re.finditer(r'((?:^#.*\n)+)(#\s*)?(ra-[a-z-]+)\s*=\s*([^;]+);',
                     conf, re.M):
    conf_items[m.group(3)] = (words(m.group(1)), bool(m.group(2)),
                              m.group(4).strip().strip('"'))
# README: the table rows "| `key=...` | default | range | what |".
readme_rows = {}
for m in re.finditer(r'^\| `(ra-[a-z-]+)=[^`]*` \| (.*?) \| (.*?) \| .*\|$',
                     readme, re.M):
    readme_rows[m.group(1)] = (words(m.group(2)), words(m.group(3)))

for name, items in (("man page", pod_items), ("etc/ra-cache.conf", conf_items),
                    ("README", readme_rows)):
    got = set(items) - {"ra-cache-config"}
    if got != set(keys):
        fail("keys differ between --help and the %s: only in --help %s, only"
             " in the %s %s" % (name, sorted(set(keys) - got), name,
                                 sorted(got - set(keys))))

for k, (default, rng) in sorted(keys.items()):
    if k in pod_items:
        t = pod_items[k]
        if ("Default %s" % default) not in t and not (
                default == "none" and "Default: none" in t):
            fail("%s: the man page does not say Default %s" % (k, default))
        if rng not in t:
            fail("%s: the man page does not give the range \"%s\"" % (k, rng))
    if k in conf_items:
        comment, commented, value = conf_items[k]
        if default == "none":
            if not commented:
                fail("%s: etc/ra-cache.conf sets a key whose default is none" % k)
        elif commented or value != default:
            fail("%s: etc/ra-cache.conf sets %r, the default is %s" % (k, value, default))
        if rng not in comment:
            fail("%s: etc/ra-cache.conf does not give the range \"%s\"" % (k, rng))
    if k in readme_rows:
        d, r = readme_rows[k]
        if not d.startswith(default):
            fail("%s: the README's default is %r, not %s" % (k, d, default))
        if r != rng:
            fail("%s: the README's range is %r, not \"%s\"" % (k, r, rng))
print("%d keys checked" % len(keys))
sys.exit(0 if ok and len(keys) >= 10 else 1)
PY
