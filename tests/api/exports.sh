#!/bin/sh
# libkdc.so exports exactly the KDC_API functions of include/kdc/kdc.h and
# error.h, and api/libkdc.map lists exactly those.
# usage: exports.sh LIBKDC_SO SOURCE_DIR
lib=$1
src=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# declarations may span lines: join, then take the name before "(" after KDC_API
tr '\n' ' ' < "$src/include/kdc/kdc.h" > "$tmp/h"
tr '\n' ' ' < "$src/include/kdc/error.h" >> "$tmp/h"
grep -o 'KDC_API [^;(]*(' "$tmp/h" | grep -v '#define' | grep -E '[ *]kdc_[a-z0-9_]+\($' | sed -E 's/.*[ *](kdc_[a-z0-9_]+)\($/\1/' | sort -u > "$tmp/header"
grep -o 'kdc_[a-z0-9_]*;' "$src/api/libkdc.map" | tr -d ';' | sort -u > "$tmp/map"
nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep -v '^KDC_1$' | sort -u > "$tmp/exported"
[ -s "$tmp/header" ] || { echo "no KDC_API declarations found"; exit 1; }
ok=0
diff "$tmp/header" "$tmp/map" > "$tmp/d1" || { echo "header vs libkdc.map:"; cat "$tmp/d1"; ok=1; }
diff "$tmp/header" "$tmp/exported" > "$tmp/d2" || { echo "header vs exported:"; cat "$tmp/d2"; ok=1; }
[ $ok = 0 ] && echo "libkdc.so exports the $(wc -l < "$tmp/header") API functions and nothing else"
exit $ok
