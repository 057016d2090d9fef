#!/bin/sh
# NVMe-over-RDMA host checks, run in the Linux peer guest (issue #32):
# `nvme-host.sh` in the guest's PATH. Reusable against any target: Linux's
# own nvmet-rdma (scenario nvme-linux-reference) or ours.
#
# Environment:
#   NVME_ADDR         the target's IPv4 address (required)
#   NVME_NQN          the NVM subsystem NQN (required)
#   NVME_PORT         RDMA-CM port (default 4420)
#   NVME_IO_QUEUES    `nvme connect -i` (default 4; the 6.1 host caps it at
#                     the online CPUs: h/rdma.c nvme_rdma_alloc_io_queues)
#   NVME_WRITE_QUEUES `-W` (default 1)
#   NVME_POLL_QUEUES  `-P` (default 1)
#   NVME_TRIES        discover attempts, 2 s apart (default 30)
#   NVME_PERF_MB      MiB moved by each sequential measurement (default 8)
#   NVME_PERF_IOS     4 KiB reads of the QD1 and the QD16 measurement
#                     (default 512)
#   NVME_HOOKS        1: the target is the project's unikernel, whose
#                     vendor-specific admin opcodes are test hooks
#                     (boot/src/bare/scenarios/nvme.rs): 0xC0 restarts its
#                     controllers under the connected host (the host must
#                     reconnect and find its data), 0xC1 ends its run once
#                     the host has disconnected
#
# Every check prints `NVME PASS <step>` or `NVME FAIL <step>: why`;
# measurements print `NVME-PERF <name> key=value ...`; the last line is
# `NVME-RESULT pass=N fail=M`, the exit status is 0 only if M is 0.
# Facts: shared/spec/nvme-rdma-target.md (§5.1, §6), shared/notes/linux-peer.md.

PORT=${NVME_PORT:-4420}
IOQ=${NVME_IO_QUEUES:-4}
WQ=${NVME_WRITE_QUEUES:-1}
PQ=${NVME_POLL_QUEUES:-1}
TRIES=${NVME_TRIES:-30}
PERF_MB=${NVME_PERF_MB:-8}
PERF_IOS=${NVME_PERF_IOS:-512}
# with the hooks, reconnect 2 s after the target dropped the queues (the
# 6.1 default is 10 s: spec §8)
CONN_OPTS=
[ "$NVME_HOOKS" = 1 ] && CONN_OPTS="-c 2"
npass=0
nfail=0
pass() { echo "NVME PASS $1"; npass=$((npass + 1)); }
fail() { echo "NVME FAIL $1: $2"; nfail=$((nfail + 1)); }
finish() {
    if [ "$nfail" != 0 ]; then
        dmesg | grep -i nvme | tail -n 30 | sed 's/^/nvme-host: dmesg: /'
    fi
    echo "NVME-RESULT pass=$npass fail=$nfail"
    [ "$nfail" = 0 ]
    exit $?
}
# seconds since boot, 10 ms resolution
now() { cut -d' ' -f1 /proc/uptime; }

if [ -z "$NVME_ADDR" ] || [ -z "$NVME_NQN" ]; then
    fail env "NVME_ADDR and NVME_NQN must be set"
    finish
fi

# 1. discovery: the subsystem is listed
i=0
ok=
while [ $i -lt "$TRIES" ]; do
    if nvme discover -t rdma -a "$NVME_ADDR" -s "$PORT" >/tmp/disc 2>&1; then
        ok=1
        break
    fi
    i=$((i + 1))
    sleep 2
done
cat /tmp/disc
if [ -z "$ok" ]; then
    fail discover "no answer after $TRIES tries: $(tail -n 1 /tmp/disc)"
    finish
fi
if grep -q "subnqn: *$NVME_NQN\$" /tmp/disc; then
    pass "discover (after $i retries; $(grep -c '=====Discovery Log Entry' /tmp/disc) entries)"
else
    fail discover "$NVME_NQN not in the discovery log"
fi

# the namespace's block device of the connected subsystem, waited for up to
# 30 s: the multipath head node under /sys/class/nvme-subsystem when the
# controller reports CMIC bit 1 (Linux nvmet), else the controller's own
# namespace node under /sys/class/nvme/nvmeN (6.1 h/multipath.c
# nvme_mpath_alloc_disk makes no head for a single-controller subsystem)
DEV=
wait_dev() {
    DEV=
    j=0
    while [ $j -lt 300 ]; do
        for s in /sys/class/nvme-subsystem/* /sys/class/nvme/*; do
            [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NVME_NQN" ] || continue
            for n in "$s"/nvme*n*; do
                [ -e "$n" ] || continue
                b=${n##*/}
                if [ -b "/dev/$b" ]; then
                    DEV=/dev/$b
                    return 0
                fi
            done
        done
        sleep 0.1
        j=$((j + 1))
    done
    return 1
}
# the controller (nvmeN) of the connected subsystem
ctrl() {
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NVME_NQN" ] && echo "${c##*/}" && return 0
    done
    return 1
}
connect() {
    if nvme connect -t rdma -a "$NVME_ADDR" -s "$PORT" -n "$NVME_NQN" \
        -i "$IOQ" -W "$WQ" -P "$PQ" $CONN_OPTS >/tmp/conn 2>&1; then
        pass "$1 (-i $IOQ -W $WQ -P $PQ) $(head -n 1 /tmp/conn)"
    else
        fail "$1" "$(cat /tmp/conn)"
        finish
    fi
    if wait_dev; then
        pass "$1 block device $DEV"
    else
        fail "$1 block device" "none for $NVME_NQN within 30 s"
        finish
    fi
}
disconnect() {
    if nvme disconnect -n "$NVME_NQN" >/tmp/disc 2>&1 &&
        grep -q "disconnected 1 controller" /tmp/disc; then
        pass "$1 ($(cat /tmp/disc))"
    else
        fail "$1" "$(cat /tmp/disc)"
    fi
    j=0
    while [ -b "$DEV" ] && [ $j -lt 100 ]; do sleep 0.1; j=$((j + 1)); done
    [ -b "$DEV" ] && fail "$1 device gone" "$DEV still there"
}

# 2. connect with several I/O queues
connect connect
C=$(ctrl)
# what the 6.1 host asks for: min(-i, online CPUs) + -W + -P (spec §1.4)
cpus=$(grep -c '^processor' /proc/cpuinfo)
want=$((IOQ < cpus ? IOQ : cpus))
want=$((want + WQ + PQ))
qc=$(cat "/sys/class/nvme/$C/queue_count" 2>/dev/null)
logged=$(dmesg | grep -o 'creating [0-9]* I/O queues' | tail -n 1 | cut -d' ' -f2)
echo "nvme-host: $C queue_count=$qc (admin + I/O), dmesg: ${logged:-nothing} I/O queues, asked $want"
if [ "$qc" = $((want + 1)) ] && [ "${logged:-$want}" = "$want" ]; then
    pass "queues ($want I/O queues + admin)"
else
    fail queues "queue_count '$qc', dmesg '$logged', want $want I/O + admin"
fi
for f in model serial firmware_rev transport address cntlid state; do
    echo "nvme-host: $C $f: $(cat "/sys/class/nvme/$C/$f" 2>/dev/null)"
done
nvme list-subsys 2>&1 | head -n 12

B=${DEV#/dev/}
LBS=$(cat "/sys/block/$B/queue/logical_block_size")
SIZE=$(($(cat "/sys/block/$B/size") * 512))
echo "nvme-host: $DEV $SIZE bytes, logical block $LBS"

# Layout of the namespace: ext4 in [0, 16 MiB), the O_DIRECT pattern in
# [16, 48 MiB), the measurements in [48, 48 + NVME_PERF_MB MiB).
MIB=1048576
FS_MB=16
PAT_OFF=$((FS_MB * MIB))
PERF_OFF=$((48 * MIB))

# 3. O_DIRECT pattern: each size at three offsets, the pattern names size
# and offset (misplaced data fails); every write first, then every read
SIZES="512 1024 4096 8192 65536 131072 524288 1048576"
layout() {
    i=0
    for s in $SIZES; do
        for k in 0 1 2; do
            echo "$s $((PAT_OFF + i * 4 * MIB + k * (MIB + LBS * (k + 1))))"
        done
        i=$((i + 1))
    done
}
: >/tmp/sums
if [ $((PERF_OFF + PERF_MB * MIB)) -gt "$SIZE" ]; then
    fail pattern "namespace of $SIZE bytes is smaller than $((PERF_OFF / MIB + PERF_MB)) MiB"
else
    layout | while read -r s o; do
        if [ $((s % LBS)) != 0 ]; then
            echo "skip $s $o"
            continue
        fi
        yes "nvme pattern size $s offset $o" | head -c "$s" >/tmp/pat
        sum=$(md5sum </tmp/pat | cut -d' ' -f1)
        if dd if=/tmp/pat of="$DEV" bs="$s" count=1 seek="$o" oflag=direct,seek_bytes conv=notrunc 2>/tmp/dd; then
            echo "$s $o $sum" >>/tmp/sums
        else
            echo "writefail $s $o $(tail -n 1 /tmp/dd)"
        fi
    done >/tmp/pattern.log
    if grep -q writefail /tmp/pattern.log; then
        fail "pattern write" "$(grep writefail /tmp/pattern.log | head -n 3)"
    else
        pass "pattern write ($(wc -l </tmp/sums) writes, $(grep -c skip /tmp/pattern.log) sizes below the block size skipped)"
    fi
fi
check_pattern() {
    bad=0
    n=0
    while read -r s o sum; do
        got=$(dd if="$DEV" bs="$s" count=1 skip="$o" iflag=direct,skip_bytes 2>/dev/null | md5sum | cut -d' ' -f1)
        n=$((n + 1))
        if [ "$got" != "$sum" ]; then
            echo "nvme-host: mismatch at $o size $s: $got != $sum"
            bad=$((bad + 1))
        fi
    done </tmp/sums
    if [ "$n" -gt 0 ] && [ "$bad" = 0 ]; then
        pass "$1 ($n reads identical)"
    else
        fail "$1" "$bad of $n reads differ"
    fi
}
check_pattern "pattern read"

# 4. ext4 in the first 16 MiB (mkfs discards that range first)
MNT=/mnt/nvme
mkdir -p $MNT
if mkfs.ext4 -F -q "$DEV" ${FS_MB}M >/tmp/mkfs 2>&1; then
    pass mkfs.ext4
else
    fail mkfs.ext4 "$(tail -n 2 /tmp/mkfs)"
fi
files() {
    for n in 1 2 3 4 5; do
        yes "file $n of the nvme host check" | head -c $((n * n * 37000)) >"$MNT/f$n"
    done
    dd if=/dev/urandom of=$MNT/big bs=65536 count=64 2>/dev/null
    mkdir -p $MNT/dir
    cp $MNT/f3 $MNT/dir/copy
}
if mount -t ext4 "$DEV" $MNT 2>/tmp/mnt; then
    files
    (cd $MNT && md5sum f1 f2 f3 f4 f5 big dir/copy) >/tmp/fsums
    sync
    if umount $MNT; then pass "mount, write files, umount"; else fail umount "busy"; fi
else
    fail mount "$(cat /tmp/mnt)"
fi
check_files() {
    if mount -t ext4 "$DEV" $MNT 2>/tmp/mnt; then
        if (cd $MNT && md5sum -c /tmp/fsums) >/tmp/fcheck 2>&1; then
            pass "$1 ($(grep -c ': OK' /tmp/fcheck) files identical)"
        else
            fail "$1" "$(grep -v ': OK' /tmp/fcheck | head -n 3)"
        fi
        umount $MNT || fail "$1 umount" busy
    else
        fail "$1" "mount: $(cat /tmp/mnt)"
    fi
}
check_files "remount, files read back"

# 5. disconnect, connect again: the data is still there
disconnect disconnect
connect reconnect
check_files "after reconnect, files read back"
check_pattern "after reconnect, pattern read"

# 5b. (our target) its controllers restarted under the connected host: the
# host's error recovery reconnects a new association, the data is there
hook() { # opcode what
    C=$(ctrl)
    if nvme admin-passthru "/dev/$C" --opcode="$1" >/tmp/hook 2>&1; then
        pass "$2 (admin opcode $1 on $C)"
    else
        fail "$2" "$(cat /tmp/hook)"
    fi
}
state() { cat "/sys/class/nvme/$(ctrl)/state" 2>/dev/null; }
if [ "$NVME_HOOKS" = 1 ]; then
    hook 0xc0 "target restart"
    # the queues drop within a moment; then live again after the reconnect
    j=0
    while [ "$(state)" = live ] && [ $j -lt 50 ]; do sleep 0.1; j=$((j + 1)); done
    seen=$(state)
    j=0
    while [ "$(state)" != live ] && [ $j -lt 600 ]; do sleep 0.1; j=$((j + 1)); done
    if [ "$(state)" = live ] && [ "$seen" != live ]; then
        pass "host reconnected after the restart (state went $seen, live again after $((j / 10)) s)"
    else
        fail "reconnect after restart" "state '$seen' then '$(state)'"
    fi
    dmesg | grep -E 'nvme.*(reconnect|Reconnect|creating|Removing|error recovery)' | tail -n 4
    wait_dev || fail "after restart" "no block device"
    check_files "after target restart, files read back"
    check_pattern "after target restart, pattern read"
fi

# 6. measurements (dd: Debian's fio links Ceph and GlusterFS libraries,
# too big a closure for the guest), in their own region.
perf() { # name bytes-or-ios secs unit
    awk -v n="$1" -v v="$2" -v t="$3" -v u="$4" 'BEGIN {
        if (t <= 0) t = 0.01
        if (u == "bytes") printf "NVME-PERF %s bytes=%d secs=%.2f MBps=%.2f\n", n, v, t, v / t / 1e6
        else printf "NVME-PERF %s ios=%d secs=%.2f iops=%.0f\n", n, v, t, v / t
    }'
}
n128=$((PERF_MB * 8))
t0=$(now)
if dd if=/dev/zero of="$DEV" bs=131072 count=$n128 seek=$PERF_OFF oflag=direct,seek_bytes conv=notrunc 2>/dev/null; then
    t1=$(now)
    perf seq-write-128k $((n128 * 131072)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" bytes
else
    fail "seq-write-128k" "dd failed"
fi
t0=$(now)
if dd if="$DEV" of=/dev/null bs=131072 count=$n128 skip=$PERF_OFF iflag=direct,skip_bytes 2>/dev/null; then
    t1=$(now)
    perf seq-read-128k $((n128 * 131072)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" bytes
else
    fail "seq-read-128k" "dd failed"
fi
t0=$(now)
if dd if="$DEV" of=/dev/null bs=4096 count="$PERF_IOS" skip=$PERF_OFF iflag=direct,skip_bytes 2>/dev/null; then
    t1=$(now)
    perf read-4k-qd1 "$PERF_IOS" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" ios
else
    fail "read-4k-qd1" "dd failed"
fi

# 4 KiB reads with 16 in flight: 16 dd processes at once, each on its own
# slice of the region (busybox has no fio; dd is QD1 per process)
per=$((PERF_IOS / 16))
pids=
t0=$(now)
k=0
while [ $k -lt 16 ]; do
    dd if="$DEV" of=/dev/null bs=4096 count=$per skip=$((PERF_OFF + k * per * 4096)) \
        iflag=direct,skip_bytes 2>/dev/null &
    pids="$pids $!"
    k=$((k + 1))
done
bad=0
for p in $pids; do wait "$p" || bad=$((bad + 1)); done
t1=$(now)
if [ "$bad" = 0 ]; then
    perf read-4k-qd16 $((per * 16)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" ios
else
    fail "read-4k-qd16" "$bad of 16 dd failed"
fi

[ "$NVME_HOOKS" = 1 ] && hook 0xc1 "target: end the run when the host is gone"
disconnect "final disconnect"
finish
