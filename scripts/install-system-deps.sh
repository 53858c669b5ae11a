#!/usr/bin/env bash
# Install the Debian packages kata-mem's real-component tests need.
#
#   scripts/install-system-deps.sh            # QEMU + guest build tools
#   scripts/install-system-deps.sh libvirt    # ... plus libvirt (daemon, virsh, and what
#                                             #     `pip install libvirt-python` compiles with)
#   scripts/install-system-deps.sh go         # ... checks that the machine's Go is 1.26 or later
#                                             #     (the Go module: client, NRI plugin, test rig)
#   scripts/install-system-deps.sh prometheus # ... plus prometheus and promtool (the metrics
#                                             #     tests scrape kata-mem serve with them)
#   scripts/install-system-deps.sh node       # ... plus runc, and the Go check of `go`: the
#                                             #     node rig (scripts/build-node-rig.sh builds
#                                             #     containerd and crictl; tests/node runs them)
#
# Idempotent: installs only what is missing, and runs `apt-get update` only
# when something has to be installed. Waits up to 300 s for the dpkg lock if
# another apt/dpkg process is running. Must run as root.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

log() { printf 'install-system-deps: %s\n' "$*" >&2; }

want_libvirt=0
want_go=0
want_prometheus=0
want_node=0
for arg in "$@"; do
    case "$arg" in
        libvirt) want_libvirt=1 ;;
        go) want_go=1 ;;
        prometheus) want_prometheus=1 ;;
        node) want_node=1; want_go=1 ;;
        -h|--help)
            sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
            exit 0 ;;
        *) log "unknown argument: $arg (expected: libvirt, go, prometheus, node)"; exit 2 ;;
    esac
done

# curl: the service tests drive kata-mem serve with curl --unix-socket.
# systemd: systemd-analyze verify checks the shipped units (tests/cli/test_install_layout.py).
# util-linux and iproute2: the DaemonSet harness (tests/support/daemonset.py) runs kata-mem in
# its own namespaces (unshare, nsenter, setpriv) with the pod's loopback (ip).
packages=(qemu-system-x86 qemu-utils busybox-static cpio curl systemd util-linux iproute2)
if [[ $want_libvirt -eq 1 ]]; then
    packages+=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients)
    # libvirt-python has no wheels on PyPI: the `libvirt` extra compiles against
    # libvirt-dev with gcc (libc6-dev is only a recommend of gcc) and Python.h.
    packages+=(libvirt-dev pkg-config gcc libc6-dev)
    py=${PYTHON:-python3}
    if ! "$py" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        2>/dev/null; then
        packages+=(python3-dev)
    fi
fi
if [[ $want_prometheus -eq 1 ]]; then
    packages+=(prometheus)
fi
if [[ $want_node -eq 1 ]]; then
    # runc: the OCI runtime under containerd's runc shim (containerd and crictl are built from
    # their Go modules by scripts/build-node-rig.sh; Debian's are older than 2.3).
    packages+=(runc)
fi

is_installed() {
    local status
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null || true)
    [[ $status == ii* ]]
}

missing=()
for pkg in "${packages[@]}"; do
    if ! is_installed "$pkg"; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    log "all packages present: ${packages[*]}"
else
    if [[ $(id -u) -ne 0 ]]; then
        log "missing packages (${missing[*]}) and not root; run this script as root"
        exit 1
    fi
    apt_opts=(-o DPkg::Lock::Timeout=300)
    log "installing: ${missing[*]}"
    apt-get "${apt_opts[@]}" update -q >&2
    apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# Sanity checks on the binaries the test harness needs.
for cmd in qemu-system-x86_64 cpio curl setpriv systemd-analyze; do
    command -v "$cmd" >/dev/null || { log "$cmd not found after install"; exit 1; }
done
[[ -x /bin/busybox ]] || { log "/bin/busybox (busybox-static) not found after install"; exit 1; }
if [[ $want_libvirt -eq 1 ]]; then
    for cmd in /usr/sbin/libvirtd /usr/sbin/virtlogd virsh pkg-config gcc; do
        command -v "$cmd" >/dev/null || { log "$cmd not found after install"; exit 1; }
    done
fi
if [[ $want_go -eq 1 ]]; then
    # Go comes with the machine, not from Debian: bookworm's golang-go is 1.19, and the NRI
    # plugin's modules (containerd 2.3, nri 0.12) need the go directive of go/go.mod.
    command -v go >/dev/null || { log "go not found: install Go 1.26 or later (https://go.dev/doc/install) and put it on PATH"; exit 1; }
    go_version=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)
    if ! [[ $go_version =~ ^go1\.([0-9]+) ]] || (( BASH_REMATCH[1] < 26 )); then
        log "go is ${go_version:-unreadable} ($(command -v go)); Go 1.26 or later is needed"
        exit 1
    fi
fi
if [[ $want_node -eq 1 ]]; then
    command -v runc >/dev/null || { log "runc not found after install"; exit 1; }
fi
if [[ $want_prometheus -eq 1 ]]; then
    for cmd in prometheus promtool; do
        command -v "$cmd" >/dev/null || { log "$cmd not found after install"; exit 1; }
    done
fi
log "ok ($(qemu-system-x86_64 --version | head -n1))"
