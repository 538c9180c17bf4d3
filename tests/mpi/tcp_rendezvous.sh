#!/bin/sh
# tests/mpi/tcp_rendezvous.sh KDC EXAMPLES: the TCP rendezvous against bad
# clients and misuse (docs/processes.md, "The TCP rendezvous", "Job
# token"); 2 processes training the MNIST MLP data parallel on 127.0.0.1:
#   hostile   an idle connection, a few bytes of HTTP, random bytes and a
#             HELLO with a wrong MAC reach the coordinator first: each is
#             dropped with a note, the real members meet (before, the idle
#             one held the coordinator until the deadline and the job
#             failed) and the checkpoint is byte-identical to 1 process;
#   token     KDC_JOB_TOKEN on both: the same checkpoint; a token file
#             (mode 600) on both: the same; a token file others may read:
#             exit 2 naming the file, before any connection;
#   wrong     process 1 holds another token: it is refused (exit non-zero,
#             saying so), process 0 names rank 1 as missing after 3 s;
#   public    a coordinator beyond loopback (0.0.0.0) without a token:
#             exit 2 before listening;
#   count     --num-processes 3 with a 2-device plan: exit 2 at once
#             naming the plan, not after the rendezvous timeout;
#   outcome   --save-weights on process 1 only, or a --save-weights that
#             process 0 cannot write: BOTH processes exit non-zero with the
#             same cause (process 1 used to exit 0).
set -u
KDC=$1 EX=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/kdc_rdv_XXXXXX")
trap 'rm -rf "$T"' EXIT
D=$EX/mnist_mlp
fail() { echo "FAIL: $*"; for f in "$T"/log.*; do [ -e "$f" ] && echo "--- $f" && cat "$f"; done; exit 1; }
"$KDC" compile "$D/model.json" --batch 16 --loss categorical_crossentropy --optimizer adam \
  --mesh 2 -o "$T/p.plan" 2>/dev/null || fail "compile"
FIT="--fit --x $D/train_x.npy --y $D/train_y.npy --epochs 1 --quiet"
"$KDC" run "$T/p.plan" $FIT --save-weights "$T/ref.st" || fail "1 process"
newport() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
now() { date +%s.%N; }
# job TIMEOUT [ENV0] [ENV1] [ARGS0] [ARGS1]: processes 0 and 1 on $port, each
# under `timeout 60`, saving the weights to w.st (ARGS: other flags, or
# none: "-"); exit statuses in rc.0, rc.1, stderr in log.0, log.1
job() {
  to=$1
  rm -f "$T"/rc.* "$T"/log.* "$T/w.st"
  (env ${2:-} timeout -k 5 60 "$KDC" run "$T/p.plan" $FIT --collective-timeout "$to" \
     --coordinator "127.0.0.1:$port" --num-processes 2 --process-id 0 $(args "${4:-}") >/dev/null 2>"$T/log.0"
   echo $? >"$T/rc.0") &
  [ -z "${HOSTILE:-}" ] || { python3 "$T/attack.py" "$port" >"$T/log.attack" 2>&1 & }
  sleep 0.5
  (env ${3:-} timeout -k 5 60 "$KDC" run "$T/p.plan" $FIT --collective-timeout "$to" \
     --coordinator "127.0.0.1:$port" --num-processes 2 --process-id 1 $(args "${5:-}") >/dev/null 2>"$T/log.1"
   echo $? >"$T/rc.1") &
  wait
}
rc() { cat "$T/rc.$1"; }
args() {
  case $1 in
  "") echo "--save-weights $T/w.st" ;;
  -) ;;
  *) echo "$1" ;;
  esac
}

cat >"$T/attack.py" <<'PY'
# connects bad clients to the coordinator before the real process 1 does
import os, socket, struct, sys, time
port = int(sys.argv[1])
def conn():
    for _ in range(200):
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.02)
    sys.exit("no coordinator")
socks = [conn() for _ in range(4)]
socks[1].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
socks[2].sendall(os.urandom(200))
ch = socks[3].recv(48)   # the challenge; then a HELLO with a wrong MAC
socks[3].sendall(ch[:4] + struct.pack("<II", 0x102, 2) + struct.pack("<iiIQ", 1, 2, 1, 0) + os.urandom(64))
deadline = time.time() + 15   # hold them (the idle one says nothing)
while socks and time.time() < deadline:
    for s in list(socks):
        s.settimeout(0.05)
        try:
            if s.recv(4096) == b"":
                socks.remove(s)
        except socket.timeout:
            pass
        except OSError:
            socks.remove(s)
print("held", len(socks))
PY

# hostile: bad clients first; the members still meet (timeout 20 s)
port=$(newport)
t0=$(now)
HOSTILE=1 job 20
t1=$(now)
[ "$(rc 0)" = 0 ] && [ "$(rc 1)" = 0 ] || fail "hostile: exit $(rc 0) $(rc 1)"
cmp -s "$T/w.st" "$T/ref.st" || fail "hostile: the checkpoint differs from 1 process"
grep -q "kdc: note: coordinator 127.0.0.1:$port: dropped a connection from 127.0.0.1: not a kdc process" \
  "$T/log.0" || fail "hostile: no note on the garbage"
grep -q "does not hold this job's token\|uses a job token" "$T/log.0" || fail "hostile: no note on the bad MAC"
echo "hostile: ok ($(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s)"

# token: the environment, then a file of mode 600
port=$(newport)
job 20 KDC_JOB_TOKEN=s3cret-token KDC_JOB_TOKEN=s3cret-token
[ "$(rc 0)" = 0 ] && [ "$(rc 1)" = 0 ] && cmp -s "$T/w.st" "$T/ref.st" || fail "token env"
printf 's3cret-token\n' >"$T/token"
chmod 600 "$T/token"
port=$(newport)
job 20 "" "" "--job-token-file $T/token --save-weights $T/w.st" \
  "--job-token-file $T/token --save-weights $T/w.st"
[ "$(rc 0)" = 0 ] && [ "$(rc 1)" = 0 ] && cmp -s "$T/w.st" "$T/ref.st" || fail "token file"
chmod 640 "$T/token"
"$KDC" run "$T/p.plan" $FIT --coordinator 127.0.0.1:1 --num-processes 2 --process-id 0 \
  --job-token-file "$T/token" 2>"$T/log.perm"
r=$?
[ $r = 2 ] && grep -q "$T/token: the job token file is open to group or others (mode 0640)" "$T/log.perm" ||
  fail "token file 640: exit $r: $(cat "$T/log.perm")"
echo "token: ok"

# wrong: process 1 holds another token
port=$(newport)
job 3 KDC_JOB_TOKEN=one KDC_JOB_TOKEN=two
[ "$(rc 0)" != 0 ] && [ "$(rc 1)" != 0 ] || fail "wrong token: exit $(rc 0) $(rc 1)"
grep -q "refused this process's job token" "$T/log.1" || fail "wrong token: process 1 does not say why"
grep -q "process 1 (rank 1) did not connect within 3 s" "$T/log.0" || fail "wrong token: process 0"
grep -q "dropped a connection from 127.0.0.1: it does not hold this job's token" "$T/log.0" ||
  fail "wrong token: no note"
[ ! -e "$T/w.st" ] || fail "wrong token: a checkpoint was written"
echo "wrong: ok"

# public: beyond loopback without a token
"$KDC" run "$T/p.plan" $FIT --coordinator "0.0.0.0:$(newport)" --num-processes 2 --process-id 0 \
  2>"$T/log.pub"
r=$?
[ $r = 2 ] && grep -q "is not a loopback address: a job beyond this host needs a job token" \
  "$T/log.pub" || fail "public: exit $r: $(cat "$T/log.pub")"
echo "public: ok"

# count: 3 processes for 2 devices, refused before the rendezvous (timeout 60 s)
t0=$(now)
"$KDC" run "$T/p.plan" $FIT --coordinator "127.0.0.1:$(newport)" --num-processes 3 \
  --process-id 1 2>"$T/log.count"
r=$?
t1=$(now)
[ $r = 2 ] && grep -q "^kdc: error: $T/p.plan: 3 processes (from --num-processes) cannot share the plan's 2 devices evenly" \
  "$T/log.count" || fail "count: exit $r: $(cat "$T/log.count")"
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }' || fail "count: not at once"
echo "count: ok"

# outcome: every process fails, with the same cause
port=$(newport)
job 5 "" "" - "--save-weights $T/w1.st"
[ "$(rc 0)" != 0 ] && [ "$(rc 1)" != 0 ] || fail "outcome (save on 1 only): exit $(rc 0) $(rc 1)"
grep -q "process 1 (rank 1) sent an unexpected message" "$T/log.0" &&
  grep -q "process 1 (rank 1) sent an unexpected message" "$T/log.1" || fail "outcome: not the same cause"
port=$(newport)
job 5 "" "" "--save-weights /nonexistent/w.st" "--save-weights $T/w.st"
[ "$(rc 0)" = 2 ] && [ "$(rc 1)" = 2 ] || fail "outcome (unwritable): exit $(rc 0) $(rc 1)"
grep -q "/nonexistent/w.st" "$T/log.1" || fail "outcome: process 1 does not give the cause"
[ ! -e "$T/w.st" ] || fail "outcome: a checkpoint was written"
echo "outcome: ok"
echo "ok: the rendezvous drops bad clients, authenticates members, refuses what cannot run, and agrees on failure"
