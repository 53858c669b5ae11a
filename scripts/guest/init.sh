#!/bin/sh
# /init of the kata-mem test guest (busybox ash, runs as PID 1).
#
# Loads the virtio modules listed in /lib/modules/modules.order, prints
# KATA-MEM-GUEST-READY on the console (ttyS0) and serves a line protocol on the
# virtio-serial port named "ctl" (one reply line per command):
#
#   status          -> MEM total_kb=N avail_kb=N free_kb=N online=ON/ALL held_mib=N up=SECONDS
#                      (ON/ALL: online / total memory blocks in /sys/devices/system/memory)
#   alloc MIB       -> OK alloc MIB held=TOTALMIB | ERR ...   (pinned: a tmpfs file in /dev/shm)
#   free            -> OK free                                  (deletes every held file)
#   online [STATE]  -> OK online ON/ALL  (onlines offline memory blocks; default online_movable)
#   ping            -> OK pong
#   poweroff        -> OK poweroff, then `poweroff -f` (QEMU exits with -no-reboot)
#
# A "MEM ..." status line is also printed on the console every 2 s.
# Hotplugged memory is onlined by the kernel itself: boot with
# memhp_default_state=online_movable (the Debian kernel has no default).

export PATH=/bin:/sbin
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/shm /dev/pts
# A size limit far above any RAM the guest can get: tmpfs' "100%" is computed
# once at mount time and would not follow hotplugged memory. Allocations are
# guarded against MemAvailable instead (see do_alloc).
mount -t tmpfs -o size=1T,mode=1777 tmpfs /dev/shm
hostname kata-mem-guest

HOLD_DIR=/dev/shm
# MiB that must stay available after an alloc; the guest has nothing the OOM
# killer could kill, so an OOM ends in a kernel panic.
ALLOC_RESERVE_MIB=48
CR=$(printf '\r')

log() { echo "kata-mem-init: $*"; }

while read -r mod; do
    [ -n "$mod" ] || continue
    insmod "/lib/modules/$mod.ko" || log "insmod $mod failed"
done </lib/modules/modules.order

# --- helpers (no forks: this runs under TCG) ----------------------------------
meminfo() {
    MI_TOTAL=0 MI_AVAIL=0 MI_FREE=0
    while read -r key val _unit; do
        case "$key" in
            MemTotal:) MI_TOTAL=$val ;;
            MemFree:) MI_FREE=$val ;;
            MemAvailable:) MI_AVAIL=$val ;;
        esac
    done </proc/meminfo
}

memblocks() {
    MB_ON=0 MB_ALL=0
    for st in /sys/devices/system/memory/memory*/state; do
        { read -r s <"$st"; } 2>/dev/null || continue
        MB_ALL=$((MB_ALL + 1))
        [ "$s" = online ] && MB_ON=$((MB_ON + 1))
    done
}

held_mib() {
    # Held files are named hold.SEQ.MIB
    HELD=0
    for f in "$HOLD_DIR"/hold.*.*; do
        [ -e "$f" ] || continue
        HELD=$((HELD + ${f##*.}))
    done
}

mem_line() {
    meminfo
    memblocks
    held_mib
    { read -r up _idle </proc/uptime; } 2>/dev/null || up=0
    echo "MEM total_kb=$MI_TOTAL avail_kb=$MI_AVAIL free_kb=$MI_FREE online=$MB_ON/$MB_ALL held_mib=$HELD up=$up"
}

SEQ=0
do_alloc() {
    mib=$1
    case "$mib" in
        '' | *[!0-9]*) echo "ERR alloc: bad size '$mib' (want MiB as an integer)"; return ;;
    esac
    mib=$((mib + 0))
    if [ "$mib" -le 0 ]; then
        echo "ERR alloc: size must be > 0"
        return
    fi
    meminfo
    room=$((MI_AVAIL / 1024 - ALLOC_RESERVE_MIB))
    if [ "$mib" -gt "$room" ]; then
        echo "ERR alloc $mib: only $((MI_AVAIL / 1024)) MiB available (reserve $ALLOC_RESERVE_MIB MiB)"
        return
    fi
    SEQ=$((SEQ + 1))
    f="$HOLD_DIR/hold.$SEQ.$mib"
    if dd if=/dev/zero of="$f" bs=1048576 count="$mib" 2>/dev/null; then
        held_mib
        echo "OK alloc $mib held=$HELD"
    else
        rm -f "$f"
        echo "ERR alloc $mib: dd failed"
    fi
}

do_free() {
    rm -f "$HOLD_DIR"/hold.*
    echo "OK free"
}

do_online() {
    want=${1:-online_movable}
    for st in /sys/devices/system/memory/memory*/state; do
        { read -r s <"$st"; } 2>/dev/null || continue
        [ "$s" = offline ] && { echo "$want" >"$st"; } 2>/dev/null
    done
    memblocks
    echo "OK online $MB_ON/$MB_ALL"
}

handle() {
    set -f
    set -- $1
    set +f
    cmd=${1:-}
    [ $# -gt 0 ] && shift
    case "$cmd" in
        status) mem_line ;;
        alloc) do_alloc "${1:-}" ;;
        free) do_free ;;
        online) do_online "${1:-}" ;;
        ping) echo "OK pong" ;;
        poweroff)
            echo "OK poweroff"
            sync
            poweroff -f
            ;;
        '') echo "ERR empty command" ;;
        *) echo "ERR unknown command: $cmd" ;;
    esac
}

find_ctl_port() {
    for d in /sys/class/virtio-ports/*; do
        { read -r n <"$d/name"; } 2>/dev/null || continue
        if [ "$n" = ctl ]; then
            PORT="/dev/${d##*/}"
            return 0
        fi
    done
    return 1
}

# --- console status ticker -------------------------------------------------------
(
    while :; do
        mem_line
        sleep 2
    done
) &

# --- control port ------------------------------------------------------------------
PORT=
i=0
while ! find_ctl_port; do
    i=$((i + 1))
    if [ "$i" -ge 30 ]; then
        break
    fi
    sleep 0.1
done
if [ -n "$PORT" ]; then
    i=0
    while [ ! -c "$PORT" ] && [ "$i" -lt 100 ]; do
        i=$((i + 1))
        sleep 0.1
    done
fi

if [ -z "$PORT" ] || [ ! -c "$PORT" ]; then
    log "no virtio-serial port named ctl; console only"
    echo "KATA-MEM-GUEST-READY ctl=none"
    while :; do sleep 3600; done
fi

exec 3<>"$PORT"
mem_line
echo "KATA-MEM-GUEST-READY ctl=$PORT"

# Reading a virtio-serial port returns EOF while no host end is connected:
# retry after a short sleep. Replies block until the host end is connected.
while :; do
    line=
    if read -r line <&3; then
        handle "${line%"$CR"}" >&3
    else
        [ -n "$line" ] && handle "${line%"$CR"}" >&3
        sleep 0.2
    fi
done
