#!/bin/sh
# Every flag the kdc command line parses (cli_flag / cli_flag_value calls
# in tools/*.c) appears in `kdc --help`.  usage: help_flags.sh KDC TOOLS_DIR
kdc=$1
tools=$2
help=$("$kdc" --help) || { echo "kdc --help failed"; exit 1; }
flags=$(grep -ho 'cli_flag\(_value\)\?(&\?a, "-[-a-z]*"' "$tools"/*.c | grep -o '"-[-a-z]*"' | tr -d '"' | sort -u)
[ -n "$flags" ] || { echo "no flags found in $tools"; exit 1; }
missing=0
for f in $flags; do
  if ! printf '%s\n' "$help" | grep -q -- "$f\b"; then
    echo "kdc --help does not list $f"
    missing=1
  fi
done
[ $missing = 0 ] && echo "kdc --help lists all $(echo "$flags" | wc -l) flags"
exit $missing
