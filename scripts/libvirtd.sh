#!/usr/bin/env bash
# Run a real libvirtd (+ virtlogd) for kata-mem's libvirt tests, without systemd.
#
#   scripts/libvirtd.sh start    # set up (user, dirs, qemu.conf), start, wait for qemu:///system
#   scripts/libvirtd.sh stop     # remove kata-mem-test-* domains, stop the daemons started here
#   scripts/libvirtd.sh status   # exit 0 if qemu:///system answers, 3 if not
#
# Idempotent: `start` does nothing when the daemons it started are still running,
# or when some other libvirtd already serves qemu:///system (that one is used and
# never stopped here). `stop` never fails when the daemons are already gone.
# Pid files live in $KATA_MEM_LIBVIRT_RUN (default /run/kata-mem-test).
# Needs root and the packages of `scripts/install-system-deps.sh libvirt`.
#
# Set-up done by `start` (Debian's libvirt-daemon without libvirt-daemon-system and
# systemd lacks all three): the libvirt-qemu user and group, /var/{log,lib,cache}/libvirt/qemu,
# and /etc/libvirt/qemu.conf with exactly user/group "root" and security_driver "none"
# (a differing previous file is kept as qemu.conf.kata-mem-orig).
# The first start takes ~8 s (QEMU capability probe, cached afterwards), later ones ~0.2 s.
set -euo pipefail

URI=qemu:///system
DOMAIN_PREFIX=kata-mem-test-
RUN_DIR=${KATA_MEM_LIBVIRT_RUN:-/run/kata-mem-test}
START_TIMEOUT=${KATA_MEM_LIBVIRT_TIMEOUT:-60}
LIBVIRTD_PID=$RUN_DIR/libvirtd.pid
VIRTLOGD_PID=$RUN_DIR/virtlogd.pid
LIBVIRTD_LOG=/var/log/libvirt/libvirtd.log
QEMU_CONF=/etc/libvirt/qemu.conf
QEMU_CONF_BACKUP=$QEMU_CONF.kata-mem-orig

now_us() { printf '%s' "${EPOCHREALTIME/./}"; }
# Seconds (one decimal) since the now_us value $1.
since() { local d=$(($(now_us) - $1)); printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000)); }

log() { printf 'libvirtd.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Print the header comment; exit with status $1.
usage() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit "$1"
}

# Whether process $1 exists and is not a zombie.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) } # "pid (comm) STATE ..."
    [[ ${stat:0:1} != Z ]]
}

# Print the pid from pid file $1 if that process is alive and runs program $2.
live_pid() {
    local file=$1 prog=$2 pid comm
    [[ -r $file ]] || return 1
    pid=$(<"$file") 2>/dev/null || return 1 # written without a trailing newline
    pid=${pid//[[:space:]]/}
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$prog" ]] && alive "$pid" || return 1
    printf '%s\n' "$pid"
}

virsh_ok() {
    virsh -q -c "$URI" version >/dev/null 2>&1
}

require_tools() {
    local cmd
    for cmd in libvirtd virtlogd virsh; do
        command -v "$cmd" >/dev/null 2>&1 ||
            die "$cmd not found: run scripts/install-system-deps.sh libvirt (as root)"
    done
}

require_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (libvirtd for $URI)"
}

setup_host() {
    getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
    getent passwd libvirt-qemu >/dev/null ||
        useradd -r -g libvirt-qemu -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
    mkdir -p /var/log/libvirt/qemu /var/lib/libvirt/qemu /var/cache/libvirt/qemu /etc/libvirt "$RUN_DIR"

    local want
    want=$'# Written by kata-mem scripts/libvirtd.sh (test daemon, no systemd).\nuser = "root"\ngroup = "root"\nsecurity_driver = "none"\n'
    if [[ -f $QEMU_CONF ]] && [[ $(<"$QEMU_CONF")$'\n' == "$want" ]]; then
        return 0
    fi
    if [[ -f $QEMU_CONF && ! -e $QEMU_CONF_BACKUP ]]; then
        cp -p "$QEMU_CONF" "$QEMU_CONF_BACKUP"
        log "kept the previous $QEMU_CONF as $QEMU_CONF_BACKUP"
    fi
    printf '%s' "$want" >"$QEMU_CONF.tmp.$$"
    mv -f "$QEMU_CONF.tmp.$$" "$QEMU_CONF"
}

# The libvirtd log lines written since byte offset $1 (the log is kept across runs).
log_tail() {
    local since=${1:-0} new
    if [[ ! -r $LIBVIRTD_LOG ]]; then
        printf -- '--- %s does not exist ---\n' "$LIBVIRTD_LOG" >&2
        return 0
    fi
    new=$(tail -c "+$((since + 1))" "$LIBVIRTD_LOG" | tail -n 30)
    if [[ -n $new ]]; then
        printf -- '--- %s (this start, last 30 lines) ---\n%s\n' "$LIBVIRTD_LOG" "$new" >&2
    else
        printf -- '--- nothing new in %s; its last lines ---\n' "$LIBVIRTD_LOG" >&2
        tail -n 10 "$LIBVIRTD_LOG" >&2
    fi
}

cmd_start() {
    require_root
    require_tools
    if live_pid "$LIBVIRTD_PID" libvirtd >/dev/null && live_pid "$VIRTLOGD_PID" virtlogd >/dev/null &&
        virsh_ok; then
        log "already running (libvirtd pid $(live_pid "$LIBVIRTD_PID" libvirtd))"
        return 0
    fi
    if ! live_pid "$LIBVIRTD_PID" libvirtd >/dev/null && virsh_ok; then
        log "$URI is already served by a libvirtd not started by this script; using it"
        return 0
    fi
    setup_host
    local t0 pid vpid log_size
    t0=$(now_us)
    log_size=$(stat -c %s "$LIBVIRTD_LOG" 2>/dev/null || echo 0)
    if ! live_pid "$VIRTLOGD_PID" virtlogd >/dev/null; then
        rm -f "$VIRTLOGD_PID"
        virtlogd -d -p "$VIRTLOGD_PID" || start_failed "$log_size" "virtlogd -d failed"
    fi
    if ! live_pid "$LIBVIRTD_PID" libvirtd >/dev/null; then
        rm -f "$LIBVIRTD_PID"
        libvirtd -d -p "$LIBVIRTD_PID" || start_failed "$log_size" "libvirtd -d failed"
    fi
    local deadline=$((SECONDS + START_TIMEOUT))
    until virsh_ok; do
        if ((SECONDS >= deadline)); then
            start_failed "$log_size" "$URI not answering after ${START_TIMEOUT} s"
        fi
        # libvirtd writes its pid file right after forking; give it a moment.
        if (($(now_us) - t0 >= 2000000)) && ! live_pid "$LIBVIRTD_PID" libvirtd >/dev/null; then
            start_failed "$log_size" "libvirtd exited during start-up"
        fi
        sleep 0.1
    done
    pid=$(live_pid "$LIBVIRTD_PID" libvirtd) || pid='?'
    vpid=$(live_pid "$VIRTLOGD_PID" virtlogd) || vpid='?'
    log "libvirtd (pid $pid) and virtlogd (pid $vpid) running; $URI ready after $(since "$t0") s"
}

# Report a failed start (log offset $1, message $2), stop what was started, exit 1.
start_failed() {
    log_tail "$1"
    kill_daemon "$LIBVIRTD_PID" libvirtd
    kill_daemon "$VIRTLOGD_PID" virtlogd
    die "$2"
}

# TERM, then KILL after 5 s, the daemon in pid file $1 (program name $2).
kill_daemon() {
    local file=$1 prog=$2 pid i
    if pid=$(live_pid "$file" "$prog"); then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            log "$prog (pid $pid) ignored SIGTERM for 5 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped $prog (pid $pid)"
    fi
    rm -f "$file"
}

# QEMU processes of test domains left behind by a libvirtd that died.
orphan_qemu_pids() {
    local d cmdline
    for d in /proc/[0-9]*; do
        cmdline=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
        [[ $cmdline == *qemu-system-* && $cmdline == *"-name guest=$DOMAIN_PREFIX"* ]] || continue
        printf '%s\n' "${d#/proc/}"
    done
}

cmd_stop() {
    require_root
    local name pid t0
    t0=$(now_us)
    if command -v virsh >/dev/null 2>&1 && virsh_ok; then
        while IFS= read -r name; do
            [[ $name == "$DOMAIN_PREFIX"* ]] || continue
            virsh -q -c "$URI" destroy "$name" >/dev/null 2>&1 || true
            virsh -q -c "$URI" undefine "$name" >/dev/null 2>&1 || true
            log "removed domain $name"
        done < <(virsh -q -c "$URI" list --all --name 2>/dev/null || true)
    fi
    kill_daemon "$LIBVIRTD_PID" libvirtd
    kill_daemon "$VIRTLOGD_PID" virtlogd
    if ! live_pid "$LIBVIRTD_PID" libvirtd >/dev/null && ! virsh_ok; then
        while IFS= read -r pid; do
            [[ -n $pid ]] || continue
            log "killing orphaned test QEMU (pid $pid)"
            kill -KILL "$pid" 2>/dev/null || true
        done < <(orphan_qemu_pids)
    fi
    log "stopped after $(since "$t0") s"
}

cmd_status() {
    local pid vpid
    if pid=$(live_pid "$LIBVIRTD_PID" libvirtd); then
        if ! vpid=$(live_pid "$VIRTLOGD_PID" virtlogd); then
            echo "broken: libvirtd pid $pid, but virtlogd is not running (domains cannot start)"
            return 3
        fi
        if virsh_ok; then
            echo "running: libvirtd pid $pid, virtlogd pid $vpid ($URI answers)"
            return 0
        fi
        echo "starting or broken: libvirtd pid $pid, but $URI does not answer"
        return 3
    fi
    if command -v virsh >/dev/null 2>&1 && virsh_ok; then
        echo "running: $URI is served by a libvirtd not started by this script"
        return 0
    fi
    echo "not running"
    return 3
}

[[ $# -eq 1 ]] || usage 2
case $1 in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    -h | --help) usage 0 ;;
    *) usage 2 ;;
esac
