#!/usr/bin/env bash
# Build the tiny Linux test guest used by kata-mem's integration tests.
#
#   scripts/build-guest.sh OUTDIR
#
# Produces OUTDIR/vmlinuz (the Debian kernel that linux-image-amd64 depends on)
# and OUTDIR/initramfs.gz (static busybox + the virtio modules + scripts/guest/init.sh
# as /init). Also OUTDIR/vmlinux: the same kernel uncompressed, an ELF with a PVH
# entry point; QEMU boots it directly (-kernel vmlinux), which skips the ~5 s the
# bzImage spends being loaded and decompressed under TCG (only written when the
# kernel has PVH support and python3 is available; the harness falls back to
# vmlinuz). Only apt is used to fetch anything (`apt-get download` of the kernel
# .deb; the package is never installed). Needs: apt, dpkg-deb, cpio, gzip and
# busybox-static (scripts/install-system-deps.sh installs them).
#
# Cached: OUTDIR/guest.stamp records the inputs (kernel package + version,
# sha256 of init.sh and of this script, busybox version). When it matches and both
# outputs exist the script exits at once (without even asking apt-cache when the
# apt lists are older than the stamp). The kernel images, modules and config of
# the last kernel are kept in OUTDIR/kernel-cache/ so that a change to init.sh
# only repacks the initramfs (no re-download). The unpacked kernel package (~400 MB)
# lives in a temp dir that is always removed.
set -euo pipefail

log() { printf 'build-guest: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $# -eq 1 && -n $1 ]] || { echo "usage: $0 OUTDIR" >&2; exit 2; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
init_sh="$script_dir/guest/init.sh"
self="$script_dir/$(basename "${BASH_SOURCE[0]}")"
busybox_bin=/bin/busybox

# Modules the guest loads; dependencies found in their modinfo are added.
wanted_modules=(virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio virtio_pci
                virtio_balloon virtio_mem virtio_console)

mkdir -p "$1"
outdir=$(cd "$1" && pwd)

for cmd in apt-get apt-cache dpkg-deb cpio gzip sha256sum; do
    command -v "$cmd" >/dev/null || die "$cmd not found (run scripts/install-system-deps.sh)"
done
[[ -f $init_sh ]] || die "missing $init_sh"
[[ -x $busybox_bin ]] || die "$busybox_bin not found (install busybox-static: scripts/install-system-deps.sh)"
if ! "$busybox_bin" --list >/dev/null 2>&1; then
    die "$busybox_bin is not a working busybox"
fi
if ldd "$busybox_bin" >/dev/null 2>&1; then
    die "$busybox_bin is dynamically linked; install busybox-static"
fi

# --- inputs / cache check -------------------------------------------------------------
busybox_ver=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || echo unknown)
local_inputs=$(printf 'init_sha256=%s\nscript_sha256=%s\nbusybox=%s\n' \
    "$(sha256sum "$init_sh" | cut -d' ' -f1)" \
    "$(sha256sum "$self" | cut -d' ' -f1)" \
    "$busybox_ver")
stamp="$outdir/guest.stamp"
apt_lists=/var/lib/apt/lists

have_outputs() { [[ -f $outdir/vmlinuz && -f $outdir/initramfs.gz && -f $stamp ]]; }

# Fast path (no apt-cache, which takes >1 s per call on images without pkgcache.bin):
# the apt lists have not changed since the stamp was written, so the kernel the
# stamp names is still the one linux-image-amd64 depends on.
if have_outputs && [[ $stamp -nt $apt_lists ]] \
   && [[ $(tail -n +2 "$stamp") == "$local_inputs" ]]; then
    log "up to date: $outdir ($(head -n1 "$stamp"))"
    exit 0
fi

# Resolve the kernel package linux-image-amd64 depends on (and its version).
resolve_kernel() {
    apt-cache show --no-all-versions linux-image-amd64 2>/dev/null | awk '
        /^Depends:/ {
            sub(/^Depends:[ ]*/, "")
            n = split($0, deps, /,[ ]*/)
            for (i = 1; i <= n; i++) {
                if (deps[i] ~ /^linux-image-[0-9]/) {
                    split(deps[i], w, /[ ()=]+/)
                    print w[1], w[2]
                    exit
                }
            }
        }'
}
read -r kpkg kver_pkg < <(resolve_kernel || true) || true
if [[ -z ${kpkg:-} ]]; then
    if [[ $(id -u) -eq 0 ]]; then
        log "linux-image-amd64 not known to apt-cache; running apt-get update"
        apt-get -o DPkg::Lock::Timeout=300 update -q >&2
        read -r kpkg kver_pkg < <(resolve_kernel || true) || true
    fi
    [[ -n ${kpkg:-} ]] || die "cannot resolve the kernel package linux-image-amd64 depends on (apt-get update?)"
fi
if [[ -z ${kver_pkg:-} ]]; then   # dependency without "(= version)"
    kver_pkg=$(apt-cache show --no-all-versions "$kpkg" 2>/dev/null | awk '/^Version:/ { print $2; exit }')
    [[ -n $kver_pkg ]] || die "apt-cache show $kpkg gave no version"
fi
kabi=${kpkg#linux-image-}   # e.g. 6.1.0-57-amd64 (directory name under /lib/modules)

stamp_content=$(printf 'kernel=%s %s\n%s\n' "$kpkg" "$kver_pkg" "$local_inputs")
if have_outputs && [[ $(cat "$stamp") == "$stamp_content" ]]; then
    touch "$stamp"   # re-arm the fast path
    log "up to date: $outdir ($kpkg $kver_pkg)"
    exit 0
fi

start=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kata-mem-guest.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
rm -f "$stamp" "$outdir"/*.new

# --- kernel + modules (cached per kernel package version) -----------------------
kcache="$outdir/kernel-cache"
kstamp_content="$kpkg $kver_pkg cache-format=2"  # bump when kernel-cache contents change
if [[ -f $kcache/stamp && $(cat "$kcache/stamp") == "$kstamp_content" && -f $kcache/vmlinuz ]]; then
    log "reusing cached kernel $kpkg $kver_pkg"
else
    rm -rf "$kcache" "$kcache.new"
    mkdir -p "$tmp/deb" "$tmp/kroot" "$kcache.new/modules"
    # apt-get download as root drops privileges to _apt, which needs a readable cwd.
    chmod 0755 "$tmp"
    if id _apt >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
        chown _apt "$tmp/deb"
    fi
    log "downloading $kpkg=$kver_pkg"
    (cd "$tmp/deb" && apt-get download -q "$kpkg=$kver_pkg" >&2)
    deb=$(find "$tmp/deb" -maxdepth 1 -name '*.deb' -print -quit)
    [[ -n $deb ]] || die "apt-get download produced no .deb"
    log "unpacking $(basename "$deb") ($(du -h "$deb" | cut -f1))"
    dpkg-deb -x "$deb" "$tmp/kroot"
    rm -f "$deb"

    moddir="$tmp/kroot/lib/modules/$kabi"
    [[ -d $moddir ]] || moddir=$(find "$tmp/kroot/lib/modules" -mindepth 1 -maxdepth 1 -type d -print -quit)
    [[ -n $moddir && -d $moddir ]] || die "no lib/modules directory in $kpkg"
    vmlinuz=$(find "$tmp/kroot/boot" -maxdepth 1 -name 'vmlinuz-*' -print -quit)
    [[ -n $vmlinuz ]] || die "no boot/vmlinuz-* in $kpkg"
    cp "$vmlinuz" "$kcache.new/vmlinuz"
    config=$(find "$tmp/kroot/boot" -maxdepth 1 -name 'config-*' -print -quit)
    [[ -z $config ]] || cp "$config" "$kcache.new/config"
    if command -v python3 >/dev/null; then
        if python3 - "$kcache.new/vmlinuz" "$kcache.new/vmlinux" <<'PY' >&2
"""Extract the uncompressed ELF kernel from a bzImage; keep it only if it has a PVH entry."""
import bz2, lzma, struct, subprocess, sys, zlib

src, dst = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    img = f.read()
if img[0x202:0x206] != b"HdrS" or struct.unpack_from("<H", img, 0x206)[0] < 0x208:
    sys.exit("build-guest: vmlinux: bzImage without payload info (boot protocol < 2.08)")
setup_sects = img[0x1F1] or 4
off, length = struct.unpack_from("<II", img, 0x248)
payload = img[(setup_sects + 1) * 512 + off:][:length]

def tool(argv):
    return subprocess.run(argv, input=payload, stdout=subprocess.PIPE, check=True).stdout

if payload.startswith(b"\xfd7zXZ\x00"):
    raw = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(payload)
elif payload.startswith(b"\x1f\x8b"):
    raw = zlib.decompressobj(31).decompress(payload)
elif payload.startswith(b"\x28\xb5\x2f\xfd"):
    raw = tool(["zstd", "-qdc"])
elif payload.startswith(b"BZh"):
    raw = bz2.BZ2Decompressor().decompress(payload)
elif payload.startswith(b"\x5d\x00\x00"):
    raw = lzma.LZMADecompressor(lzma.FORMAT_ALONE).decompress(payload)
elif payload.startswith(b"\x02\x21\x4c\x18"):
    raw = tool(["lz4", "-dc"])
else:
    sys.exit(f"build-guest: vmlinux: unknown kernel compression {payload[:4].hex()}")
if raw[:5] != b"\x7fELF\x02":
    sys.exit("build-guest: vmlinux: payload is not a 64-bit ELF")
phoff, = struct.unpack_from("<Q", raw, 0x20)
phentsize, phnum = struct.unpack_from("<HH", raw, 0x36)
pvh = False
for i in range(phnum):
    p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from("<IIQQQQ", raw, phoff + i * phentsize)
    if p_type != 4:  # PT_NOTE
        continue
    pos, end = p_offset, p_offset + p_filesz
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from("<III", raw, pos)
        name = raw[pos + 12:pos + 12 + namesz].rstrip(b"\0")
        if name == b"Xen" and ntype == 18:  # XEN_ELFNOTE_PHYS32_ENTRY: PVH entry point
            pvh = True
        pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
if not pvh:
    sys.exit("build-guest: vmlinux: kernel has no PVH entry point")
with open(dst, "wb") as f:
    f.write(raw)
PY
        then
            :
        else
            log "no PVH vmlinux (see above); the guest boots from vmlinuz"
            rm -f "$kcache.new/vmlinux"
        fi
    else
        log "python3 not found: no PVH vmlinux; the guest boots from vmlinuz"
    fi

    # Find a module file by name (modules may be named with '-' or '_').
    find_module() {
        local name=$1 alt=${1//_/-}
        find "$moddir" \( -name "$name.ko" -o -name "$name.ko.xz" -o -name "$name.ko.zst" -o -name "$name.ko.gz" \
             -o -name "$alt.ko" -o -name "$alt.ko.xz" -o -name "$alt.ko.zst" -o -name "$alt.ko.gz" \) -print -quit
    }
    is_builtin() {
        [[ -f $moddir/modules.builtin ]] && grep -Eq "/(${1}|${1//_/-})\.ko$" "$moddir/modules.builtin"
    }
    # Copy one module, decompressed, into kernel-cache/modules/NAME.ko.
    extract_module() {
        local src=$1 dst=$2
        case "$src" in
            *.ko) cp "$src" "$dst" ;;
            *.ko.xz) xz -dc "$src" >"$dst" ;;
            *.ko.zst) zstd -qdc "$src" >"$dst" ;;
            *.ko.gz) gzip -dc "$src" >"$dst" ;;
            *) die "unknown module format: $src" ;;
        esac
    }
    modinfo_depends() {
        # .modinfo strings are NUL separated; no need for kmod's modinfo.
        tr '\0' '\n' <"$1" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' '
    }

    # Depth-first: dependencies before dependents -> modules.order
    declare -A state=()
    order=()
    visit() {
        local name=${1//-/_}
        case "${state[$name]:-}" in
            done) return 0 ;;
            active) die "module dependency cycle at $name" ;;
        esac
        state[$name]=active
        local src
        src=$(find_module "$name")
        if [[ -z $src ]]; then
            if is_builtin "$name"; then
                log "module $name is built into the kernel"
                state[$name]=done
                return 0
            fi
            die "module $name not found in $kpkg"
        fi
        extract_module "$src" "$kcache.new/modules/$name.ko"
        local dep
        for dep in $(modinfo_depends "$kcache.new/modules/$name.ko"); do
            visit "$dep"
        done
        state[$name]=done
        order+=("$name")
    }
    for m in "${wanted_modules[@]}"; do
        visit "$m"
    done
    printf '%s\n' "${order[@]}" >"$kcache.new/modules.order"
    echo "$kstamp_content" >"$kcache.new/stamp"
    rm -rf "$tmp/kroot"
    mv "$kcache.new" "$kcache"
    log "kernel $kabi: vmlinuz$([[ -f $kcache/vmlinux ]] && echo ' + PVH vmlinux') + ${#order[@]} modules (${order[*]})"
fi

# --- initramfs -------------------------------------------------------------------
root="$tmp/root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,lib/modules}
ln -s bin "$root/sbin"
cp "$busybox_bin" "$root/bin/busybox"
for applet in $("$busybox_bin" --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$root/bin/$applet"
done
cp "$kcache"/modules/*.ko "$root/lib/modules/"
cp "$kcache/modules.order" "$root/lib/modules/modules.order"
install -m 0755 "$init_sh" "$root/init"
# The kernel opens /dev/console for /init before devtmpfs is mounted.
if [[ $(id -u) -eq 0 ]]; then
    mknod -m 600 "$root/dev/console" c 5 1
    mknod -m 666 "$root/dev/null" c 1 3
fi
(cd "$root" && find . -print0 | LC_ALL=C sort -z \
    | cpio --null -o -H newc --owner=0:0 --quiet) | gzip -9n >"$tmp/initramfs.gz"
mv "$tmp/initramfs.gz" "$outdir/initramfs.gz"
# Hard links where possible: kernel-cache/ and OUTDIR are on the same file system.
for k in vmlinuz vmlinux; do
    if [[ -f $kcache/$k ]]; then
        if [[ ! $kcache/$k -ef $outdir/$k ]]; then
            rm -f "$outdir/$k.new"
            ln "$kcache/$k" "$outdir/$k.new" 2>/dev/null || cp "$kcache/$k" "$outdir/$k.new"
            mv -f "$outdir/$k.new" "$outdir/$k"
        fi
    else
        rm -f "$outdir/$k"
    fi
done
printf '%s\n' "$stamp_content" >"$stamp.new" && mv "$stamp.new" "$stamp"

log "built $outdir/vmlinuz ($(du -h "$outdir/vmlinuz" | cut -f1))$([[ -f $outdir/vmlinux ]] && echo ", vmlinux ($(du -h "$outdir/vmlinux" | cut -f1))") and initramfs.gz ($(du -h "$outdir/initramfs.gz" | cut -f1)) in $((SECONDS - start)) s"
