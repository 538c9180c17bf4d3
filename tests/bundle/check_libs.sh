#!/usr/bin/env bash
# tests/bundle/check_libs.sh PREFIX: does an installed kdc (cmake --install,
# or the unpacked bundle) load only its own libraries?  For bin/* and
# lib/libkdc.so, the dynamic loader itself lists what it would load
# (ld.so --list, LD_LIBRARY_PATH unset): every library must resolve inside
# PREFIX/lib, except the C library's own (SYSTEM below, as
# packaging/install_deps.cmake).  With readelf (binutils), also: bin/* and
# libkdc.so carry DT_RPATH $ORIGIN/../lib and no RUNPATH, no other file in
# lib/ has a search path leaving the bundle, and every NEEDED entry of every
# file is in lib/ or SYSTEM.  Prints PASS/FAIL lines and the newest glibc
# symbol version required; exit 1 on any FAIL.  Runs on a machine with no
# build packages (the device check calls it first).
set -u
P=$(cd "${1:?usage: check_libs.sh PREFIX}" && pwd -P)
SYSTEM='^(ld-linux-x86-64\.so\.2|linux-vdso\.so\.1|lib(c|m|dl|rt|pthread|resolv|util|anl)\.so\.[0-9.]+)$'
LDSO=/lib64/ld-linux-x86-64.so.2
fail=0
bad() { echo "FAIL $1"; fail=1; }

objs=()
for f in "$P"/bin/* "$P"/lib/libkdc.so; do [ -f "$f" ] && objs+=("$f"); done
[ ${#objs[@]} -ge 2 ] || bad "check_libs: no bin/kdc or lib/libkdc.so under $P"

# 1. what the loader loads
for f in "${objs[@]}"; do
  out=$(env -u LD_LIBRARY_PATH -u LD_PRELOAD "$LDSO" --list "$f" 2>&1) || { bad "libs ${f#$P/}: ld.so --list failed: $out"; continue; }
  n=0; outside=()
  while read -r line; do
    case $line in
      *"=> not found"*) outside+=("${line%% *}:not-found"); continue ;;
      *"=>"*) name=${line%% *}; path=$(echo "$line" | sed -E 's/.*=> ([^ ]*) .*/\1/') ;;
      /*) path=${line%% *}; name=$(basename "$path") ;;
      *) continue ;;  # linux-vdso
    esac
    n=$((n+1))
    real=$(readlink -f "$path")
    case $real in "$P"/lib/*) continue ;; esac
    [[ $name =~ $SYSTEM ]] || outside+=("$name:$path")
  done <<< "$out"
  if [ ${#outside[@]} -eq 0 ]; then echo "PASS libs ${f#$P/}: $n libraries, all from the bundle or glibc"
  else bad "libs ${f#$P/}: loaded from outside the bundle: ${outside[*]}"; fi
done

# 2. search paths and NEEDED entries (readelf)
if command -v readelf >/dev/null; then
  for f in "${objs[@]}"; do
    d=$(readelf -d "$f")
    rp=$(echo "$d" | sed -nE 's/.*\(RPATH\).*\[(.*)\]/\1/p'); rup=$(echo "$d" | sed -nE 's/.*\(RUNPATH\).*\[(.*)\]/\1/p')
    if [ "$rp" = '$ORIGIN/../lib' ] && [ -z "$rup" ]; then echo "PASS rpath ${f#$P/}: DT_RPATH \$ORIGIN/../lib"
    else bad "rpath ${f#$P/}: RPATH='$rp' RUNPATH='$rup' (want RPATH \$ORIGIN/../lib only)"; fi
  done
  nfiles=0; badneed=(); badpath=()
  for f in "${objs[@]}" "$P"/lib/*; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    nfiles=$((nfiles+1))
    d=$(readelf -d "$f" 2>/dev/null)
    for n in $(echo "$d" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p'); do
      [ -e "$P/lib/$n" ] || [[ $n =~ $SYSTEM ]] || badneed+=("${f#$P/}:$n")
    done
    case $f in "$P"/lib/libkdc.so) continue ;; "$P"/lib/*) ;; *) continue ;; esac
    for sp in $(echo "$d" | sed -nE 's/.*\((RPATH|RUNPATH)\).*\[(.*)\]/\2/p' | tr ':' ' '); do
      case $sp in '$ORIGIN'|'$ORIGIN/'|'$ORIGIN/../lib') ;; *) badpath+=("${f#$P/}:$sp") ;; esac
    done
  done
  [ ${#badneed[@]} -eq 0 ] && echo "PASS needed: every NEEDED entry of $nfiles files is in lib/ or glibc" \
    || bad "needed: not in the bundle: ${badneed[*]}"
  [ ${#badpath[@]} -eq 0 ] && echo "PASS search paths: no library in lib/ searches outside the bundle" \
    || bad "search paths leaving the bundle: ${badpath[*]}"
  glibc=$(for f in "${objs[@]}" "$P"/lib/*; do [ -f "$f" ] && readelf -W --dyn-syms "$f" 2>/dev/null; done |
          grep -oE '@GLIBC_[0-9]+\.[0-9]+' | sort -t. -k2,2n -u | tail -1)
  echo "INFO glibc: the bundle needs glibc >= ${glibc#@GLIBC_}"
else
  echo "SKIP rpath/needed: readelf not installed (binutils); the loader's own list above is the check"
fi
exit $fail
