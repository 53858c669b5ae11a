#!/usr/bin/env bash
# Install kata-mem on a node, in the layout docs/guide/install.md describes: a virtualenv
# under /opt/kata-mem, its two commands on PATH as /usr/local/bin/kata-mem and kata-mem-shim
# (links into it), and configs/systemd's units in /etc/systemd/system, their ExecStart the
# first link. Debian 12 refuses `pip install` into the system Python (PEP 668, "externally
# managed"); a virtualenv of its own is what it asks for.
#
#   scripts/install-node.sh [SOURCE]
#   scripts/install-node.sh --uninstall      (what scripts/uninstall-node.sh runs)
#
# SOURCE: a wheel (kata_mem-*.whl) or a checkout (default: the one this script is in).
# Environment: PREFIX (/opt/kata-mem), BIN_DIR (/usr/local/bin), UNIT_DIR
# (/etc/systemd/system; "-" installs no units), EXTRAS (e.g. libvirt), PYTHON (python3); the
# uninstall takes PREFIX and SYSTEMCTL (systemctl; "-" runs none, for a root that is not the
# running system's). Starts nothing: it prints the systemctl commands. Needs python3-venv
# (Debian) and PyPI for the dependencies, and, for the units, configs/systemd/ beside
# scripts/ (a checkout's layout: copy both with a wheel).
#
# It touches only what it wrote itself, and keeps the proof: PREFIX/kata-mem-install.manifest
# lists every path it made, a file with its sha256, a link with its target, a directory it
# created. Run again with another SOURCE to upgrade in place: a path it wrote that is still as
# written is replaced; one changed since (an edited unit) is kept and named; a path it did not
# write stops it before anything changes. The uninstall removes what the manifest lists while
# it is as written and names everything else. Site settings belong in drop-ins
# (kata-mem.service.d/), which it never writes. Run as root, it takes no file and writes in no
# directory that another user owns or may write: such a user could have put anything there.
set -euo pipefail
umask 022 # what it makes is its user's alone to change, whatever the caller's umask
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${PREFIX:-/opt/kata-mem}
bin_dir=${BIN_DIR:-/usr/local/bin}
unit_dir=${UNIT_DIR:-/etc/systemd/system}
systemctl=${SYSTEMCTL:-systemctl}
py=${PYTHON:-python3}
units=$root/configs/systemd
commands=(kata-mem kata-mem-shim)
unit_names=(kata-mem.socket kata-mem.service)
manifest_name=kata-mem-install.manifest
manifest_header="# kata-mem install manifest v1: written by scripts/install-node.sh, read by its \
--uninstall; one path a line, f<TAB>sha256<TAB>PATH (a file it wrote), l<TAB>target<TAB>PATH (a \
link), d<TAB>-<TAB>PATH (a directory it made)"
me=$(id -u)
tab=$'\t'
nl=$'\n'
tag=install-node
nothing="nothing was installed"
log() { printf '%s: %s\n' "$tag" "$*" >&2; }
# stop MESSAGE: the one line that says why, and that nothing was done.
stop() {
    log "$1; $nothing"
    exit 1
}

# -- what is on disk ----------------------------------------------------------------------
# What find says of a path (never following a link): its type (f, d, l...), owner's uid and
# name, mode, a link's target and a regular file's sha256, by path. Loaded in bulk: a
# virtualenv is two thousand files.
declare -A m_type=() m_uid=() m_user=() m_mode=() m_link=() m_hash=()
why=""

load_meta() { # FIND_ARGS...: find's paths and options
    local y u n mo l p h
    while IFS= read -r -d '' y && IFS= read -r -d '' u && IFS= read -r -d '' n &&
        IFS= read -r -d '' mo && IFS= read -r -d '' l && IFS= read -r -d '' p; do
        m_type[$p]=$y m_uid[$p]=$u m_user[$p]=$n m_mode[$p]=$mo m_link[$p]=$l
        unset 'm_hash[$p]'
    done < <(find "$@" -printf '%y\0%U\0%u\0%m\0%l\0%p\0' 2>/dev/null || true)
    while IFS= read -r -d '' h; do
        m_hash[${h:66}]=${h:0:64}
    done < <(find "$@" -type f -print0 2>/dev/null | xargs -0 -r sha256sum -z -- 2>/dev/null || true)
}

there() { [ -e "$1" ] || [ -L "$1" ]; }

# sound PATH (loaded): no user but root and this one could have changed it: it is theirs, and
# no group or other may write it, unless it is a link (whose mode means nothing) or a sticky
# directory such as /tmp (where only an entry's owner may rename or remove it). Else why.
sound() {
    local p=$1 mode
    if [ "${m_uid[$p]}" != 0 ] && [ "${m_uid[$p]}" != "$me" ]; then
        why="owned by ${m_user[$p]} (uid ${m_uid[$p]})"
        return 1
    fi
    [ "${m_type[$p]}" != l ] || return 0
    mode=$((8#${m_mode[$p]}))
    if ((mode & 8#022)) && ! { [ "${m_type[$p]}" = d ] && ((mode & 8#1000)); }; then
        why="mode $(printf '%04o' "$mode"), writable by group or others"
        return 1
    fi
}

# sound_path PATH: PATH and every directory above it are sound, as far as they exist, along
# the path as written and along the one the kernel resolves (a link on the way leads
# elsewhere). Else why, naming the one that is not when it is not PATH itself.
sound_path() {
    local real
    sound_walk "$1" "$1" || return 1
    real=$(realpath -m -- "$1")
    [ "$real" = "$1" ] || sound_walk "$real" "$1"
}
sound_walk() { # PATH GIVEN
    local at="" rest=${1#/} part
    load_meta / -maxdepth 0
    sound / || { why="/: $why"; return 1; }
    while [ -n "$rest" ]; do
        part=${rest%%/*}
        if [ "$part" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
        [ -n "$part" ] || continue
        at=$at/$part
        there "$at" || return 0
        load_meta "$at" -maxdepth 0
        if ! sound "$at"; then
            [ "$at" = "$2" ] || why="$at: $why"
            return 1
        fi
    done
}

# -- the manifest ---------------------------------------------------------------------------
declare -A old_kind=() old_value=()
old_order=()

# read_manifest FILE: its entries, or why not. Only what this script writes is taken.
read_manifest() {
    local file=$1 line kind value path n=0 re=$'^([fld])\t([^\t]+)\t(/[^\t]*)$'
    load_meta "$file" -maxdepth 0
    if [ "${m_type[$file]-}" != f ]; then
        why="$file: not a regular file"
        return 1
    fi
    sound "$file" || { why="$file: $why"; return 1; }
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        if [ "$n" = 1 ]; then
            [ "$line" = "$manifest_header" ] || { why="$file: line 1 is not the header install-node.sh writes"; return 1; }
            continue
        fi
        kind="" value="" path=""
        if [[ $line =~ $re ]]; then
            kind=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]} path=${BASH_REMATCH[3]}
        fi
        if [ -z "$kind" ] || { [ "$kind" = f ] && ! [[ $value =~ ^[0-9a-f]{64}$ ]]; } ||
            { [ "$kind" = d ] && [ "$value" != - ]; } || [ -n "${old_kind[$path]+x}" ]; then
            why="$file: line $n is not one install-node.sh writes"
            return 1
        fi
        old_kind[$path]=$kind old_value[$path]=$value
        old_order+=("$path")
    done <"$file"
}

# as_written PATH (loaded): PATH is what the manifest says the install wrote there, and sound.
# Else why.
as_written() {
    local p=$1 value=${old_value[$1]}
    sound "$p" || return 1
    case ${old_kind[$p]} in
    f)
        [ "${m_type[$p]}" = f ] || { why="no longer a file"; return 1; }
        [ "${m_hash[$p]-}" = "$value" ] || { why="changed since the install wrote it"; return 1; }
        ;;
    l)
        [ "${m_type[$p]}" = l ] || { why="no longer a link"; return 1; }
        [ "${m_link[$p]}" = "$value" ] || { why="a link to ${m_link[$p]} now, not $value"; return 1; }
        ;;
    d) [ "${m_type[$p]}" = d ] || { why="no longer a directory"; return 1; } ;;
    esac
}

# inside_sound PATH: each directory between PATH and PREFIX is sound (loaded by a scan).
inside_sound() {
    local d=${1%/*}
    while [ "${#d}" -gt "${#prefix}" ] && [ -n "${m_type[$d]+x}" ]; do
        sound "$d" || { why="in $d, $why"; return 1; }
        d=${d%/*}
    done
}

# classify PATH: st is free (nothing there), ours (as the install wrote it), changed (the
# install wrote it, and it is not as written now: why says how) or theirs (not the install's).
classify() {
    local p=$1
    if ! there "$p"; then
        st=free
    elif [ -z "${old_kind[$p]+x}" ]; then
        st=theirs
    else
        load_meta "$p" -maxdepth 0
        if as_written "$p"; then st=ours; else st=changed; fi
    fi
}

# What the manifest will hold outside PREFIX, in the order recorded; recording a path again
# replaces its line.
new_lines=()
declare -A recorded=()
record() { # KIND VALUE PATH
    case $3$2 in
    *"$tab"* | *"$nl"*)
        log "not in the manifest (a tab or newline in its name): $3"
        return 0
        ;;
    esac
    if [ -n "${recorded[$3]+x}" ]; then
        new_lines[${recorded[$3]}]="$1$tab$2$tab$3"
    else
        recorded[$3]=${#new_lines[@]}
        new_lines+=("$1$tab$2$tab$3")
    fi
}

# make_dir DIR: DIR and the directories missing above it, each recorded.
make_dir() {
    local d=$1 missing=()
    while ! there "$d"; do
        missing=("$d" "${missing[@]}")
        d=$(dirname "$d")
    done
    for d in "${missing[@]}"; do
        mkdir -m 0755 -- "$d"
        record d - "$d"
        made=1
    done
}

# absolute NAME: the variable NAME holds an absolute path without a tab or newline: made
# lexically plain (no //, /./, .., trailing /), or the script stops.
absolute() {
    local name=$1 value=${!1} label
    label=$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')
    case $value in
    *"$tab"* | *"$nl"*) stop "$label $value: a tab or newline in the path; expected a plain absolute path" ;;
    /*) printf -v "$name" '%s' "$(realpath -ms -- "$value")" ;;
    *) stop "$label $value: expected an absolute path" ;;
    esac
}

# -- install ------------------------------------------------------------------------------
installed_version() {
    [ -x "$prefix/bin/python" ] || return 0
    "$prefix/bin/python" -I -c 'import importlib.metadata as m; print(m.version("kata_mem"))' \
        2>/dev/null || true
}

# The manifest, from what the install made: the directories it made above PREFIX, PREFIX's
# contents as they are now but for what was there before and not the install's, then the
# links and units. Written whenever the install made something, even if it then failed, so
# that the uninstall finds all of it.
write_manifest() {
    local p tmp pre=() post=() line
    # Outside PREFIX: the directories made first, then the links and units, for a reader.
    [ -n "$made" ] && [ -d "$prefix" ] || return 0
    for line in "${new_lines[@]}"; do
        if [ "${line:0:1}" = d ]; then pre+=("$line"); else post+=("$line"); fi
    done
    m_type=() m_uid=() m_user=() m_mode=() m_link=() m_hash=()
    load_meta "$prefix" -mindepth 1
    tmp=$(mktemp "${prefix%/}/.$manifest_name.XXXXXX")
    {
        printf '%s\n' "$manifest_header"
        [ "${#pre[@]}" = 0 ] || printf '%s\n' "${pre[@]}"
        [ -z "$prefix_made" ] || printf 'd\t-\t%s\n' "$prefix"
        while IFS= read -r -d '' p; do
            case $p in "$manifest" | "$prefix/.$manifest_name".*) continue ;; esac
            [ -z "${foreign[$p]+x}" ] || continue
            case $p in *"$tab"* | *"$nl"*)
                log "not in the manifest (a tab or newline in its name): $p"
                continue
                ;;
            esac
            # What find listed but could not describe (gone meanwhile, unreadable) stays out.
            case ${m_type[$p]-} in
            f) [ -z "${m_hash[$p]-}" ] || printf 'f\t%s\t%s\n' "${m_hash[$p]}" "$p" ;;
            l) printf 'l\t%s\t%s\n' "${m_link[$p]}" "$p" ;;
            d) printf 'd\t-\t%s\n' "$p" ;;
            esac
        done < <(find "$prefix" -mindepth 1 -print0)
        [ "${#post[@]}" = 0 ] || printf '%s\n' "${post[@]}"
    } >"$tmp"
    chmod 0644 "$tmp"
    mv -f -- "$tmp" "$manifest"
}

finish() {
    local status=$?
    trap - EXIT
    [ -z "$unit_tmp" ] || rm -f -- "$unit_tmp"
    if ! write_manifest; then
        log "could not write $manifest: the uninstall will not know what was made"
        status=1
    fi
    exit "$status"
}

install_node() {
    local source=${1:-$root} spec p c unit before after refusals=() kept=() targets=()
    # A SOURCE that is not there (a mistyped wheel path) stops everything before anything is
    # made: pip would fail only after the virtualenv was.
    if [ ! -e "$source" ]; then
        log "no $source: expected a kata_mem-*.whl file or a kata-mem checkout; nothing was installed"
        exit 1
    fi
    # The units come from beside this script (a checkout's layout), not from the wheel:
    # without them, stop before anything is made.
    if [ "$unit_dir" != - ]; then
        for unit in "${unit_names[@]}"; do
            if [ ! -f "$units/$unit" ]; then
                log "no $units/$unit: copy configs/systemd/ beside scripts/ as a checkout has them, or install no units (UNIT_DIR=-); nothing was installed"
                exit 1
            fi
        done
    fi
    absolute prefix
    absolute bin_dir
    [ "$unit_dir" = - ] || absolute unit_dir
    manifest=${prefix%/}/$manifest_name
    # As root, what it installs and runs as root is nothing another user could have written.
    source=$(realpath -s -- "$source")
    sound_path "$source" || stop "SOURCE $source: $why: another user could have written it"
    if [ "$unit_dir" != - ]; then
        for unit in "${unit_names[@]}"; do
            sound_path "$units/$unit" || stop "$units/$unit: $why: another user could have written it"
        done
    fi
    # Where it writes: no directory another user could write (or swap on the way there).
    sound_path "$prefix" || stop "PREFIX $prefix: $why"
    sound_path "$bin_dir" || stop "BIN_DIR $bin_dir: $why"
    [ "$unit_dir" = - ] || sound_path "$unit_dir" || stop "UNIT_DIR $unit_dir: $why"
    if [ -L "$prefix" ]; then
        stop "PREFIX $prefix: a link (to $(readlink -- "$prefix")): expected a directory of the install's own"
    elif there "$prefix" && [ ! -d "$prefix" ]; then
        stop "PREFIX $prefix: not a directory: expected a directory of the install's own"
    fi

    # What the install wrote before, if anything: PREFIX's manifest. Without one, PREFIX is
    # new or empty: a directory of files is someone else's (a virtualenv, /usr), even if the
    # variable was only mistyped.
    if there "$manifest"; then
        read_manifest "$manifest" || stop "$why"
    elif there "$prefix" && [ -n "$(find "$prefix" -mindepth 1 -maxdepth 1 -print -quit)" ]; then
        stop "PREFIX $prefix: holds files install-node.sh did not write (no $manifest_name): expected a new or empty directory, or an install of this script"
    fi

    # Every path it would write, before it writes any: a path it did not write stops it; one
    # it wrote and that was changed since is kept.
    declare -gA keep=() foreign=()
    for c in "${commands[@]}"; do targets+=("${bin_dir%/}/$c"); done
    if [ "$unit_dir" != - ]; then
        for unit in "${unit_names[@]}"; do targets+=("${unit_dir%/}/$unit"); done
    fi
    for p in "${targets[@]}"; do
        classify "$p"
        case $st in
        theirs) refusals+=("$p: not written by install-node.sh (no entry in $manifest): move it away, or install elsewhere (BIN_DIR, UNIT_DIR)") ;;
        changed)
            keep[$p]=1
            kept+=("kept $p: $why")
            ;;
        esac
    done
    # PREFIX's own contents: pip replaces what it installed, so every file the install wrote
    # there must still be as written; what others added is left, and stays out of the
    # manifest.
    if [ "${#old_order[@]}" != 0 ]; then
        load_meta "$prefix" -mindepth 1
        for p in "${!m_type[@]}"; do
            case $p in "$manifest" | "$prefix/.$manifest_name".*) ;; "$prefix"/*)
                [ -n "${old_kind[$p]+x}" ] || foreign[$p]=1
                ;;
            esac
        done
        for p in "${old_order[@]}"; do
            case $p in "$prefix"/*) ;; *) continue ;; esac
            there "$p" || continue
            if ! as_written "$p" || ! inside_sound "$p"; then
                refusals+=("$p: $why: pip would replace it")
            fi
        done
    fi
    if [ "${#refusals[@]}" != 0 ]; then
        for p in "${refusals[@]:0:20}"; do log "$p"; done
        [ "${#refusals[@]}" -le 20 ] || log "... and $((${#refusals[@]} - 20)) more"
        stop "each is left as it is"
    fi

    # From here on the install makes things, and the manifest records them whatever happens.
    # What an earlier install made outside PREFIX stays recorded while it is there: the
    # directories it made, the links and units (rewritten below, unless kept), and any it
    # wrote where BIN_DIR or UNIT_DIR pointed then.
    made="" prefix_made="" unit_tmp=""
    for p in "${old_order[@]}"; do
        case $p in
        "$prefix") prefix_made=1 ;;
        "$prefix"/*) ;;
        *) if there "$p"; then record "${old_kind[$p]}" "${old_value[$p]}" "$p"; fi ;;
        esac
    done
    [ "${#old_order[@]}" = 0 ] || made=1
    trap finish EXIT
    if ! there "$prefix"; then
        make_dir "$(dirname "$prefix")"
        mkdir -m 0755 -- "$prefix"
        made=1 prefix_made=1
    fi
    if [ ! -x "$prefix/bin/python" ]; then
        made=1
        if ! "$py" -m venv "$prefix"; then
            log "'$py -m venv $prefix' failed (on Debian: apt-get install python3-venv)"
            exit 1
        fi
    fi
    spec=$source
    if [ -n "${EXTRAS:-}" ]; then
        spec="$source[$EXTRAS]"
    fi
    before=$(installed_version)
    "$prefix/bin/python" -I -m pip install -q --disable-pip-version-check --upgrade "$spec" >&2
    after=$(installed_version)
    if [ -z "$before" ]; then
        log "installed kata-mem $after in $prefix"
    elif [ "$before" != "$after" ]; then
        log "upgraded kata-mem $before to $after in $prefix"
    else
        # pip keeps an installed version when a wheel has the same (it builds a checkout
        # again): the wheel's files go in all the same, a rebuilt wheel's included.
        if [ -f "$source" ]; then
            "$prefix/bin/python" -I -m pip install -q --disable-pip-version-check \
                --no-deps --force-reinstall "$source" >&2
        fi
        log "reinstalled kata-mem $after in $prefix: the version it had, its files replaced by" \
            "$source's"
    fi

    make_dir "$bin_dir"
    # kata-mem-shim, the shim protocol answered by serve (docs/guide/shim.md): beside kata-mem.
    for c in "${commands[@]}"; do
        p=${bin_dir%/}/$c
        [ -z "${keep[$p]+x}" ] || continue
        ln -sfn -- "$prefix/bin/$c" "$p"
        record l "$prefix/bin/$c" "$p"
    done
    log "${bin_dir%/}/kata-mem and ${bin_dir%/}/kata-mem-shim link to it"
    if [ "$unit_dir" != - ]; then
        make_dir "$unit_dir"
        for unit in "${unit_names[@]}"; do
            p=${unit_dir%/}/$unit
            [ -z "${keep[$p]+x}" ] || continue
            # Written beside it and renamed over it: a unit is never seen half written (the
            # EXIT trap removes the temporary file of an install that stops).
            unit_tmp=$(mktemp "${unit_dir%/}/.$unit.XXXXXX")
            # The shipped units run /usr/local/bin/kata-mem: BIN_DIR's link where it differs.
            sed "s#/usr/local/bin/kata-mem#${bin_dir%/}/kata-mem#g" "$units/$unit" >"$unit_tmp"
            chmod 0644 "$unit_tmp"
            mv -f -- "$unit_tmp" "$p"
            unit_tmp=""
            record f "$(sha256sum <"$p" | cut -c1-64)" "$p"
        done
        log "units in $unit_dir: systemctl daemon-reload && systemctl enable --now kata-mem.socket" \
            "(an upgrade: systemctl daemon-reload && systemctl restart kata-mem.service)"
    fi
    for p in "${kept[@]}"; do
        case $p in
        */kata-mem.socket:* | */kata-mem.service:*)
            unit=${p%%:*}
            unit=${unit##*/}
            log "$p; the shipped unit is $units/$unit (site settings belong in a drop-in," \
                "$unit.d/: systemctl edit $unit)"
            ;;
        *) log "$p" ;;
        esac
    done
    # Drop-ins are the admin's: never written here, and named so that nobody wonders.
    if [ "$unit_dir" != - ]; then
        for unit in "${unit_names[@]}"; do
            [ -d "${unit_dir%/}/$unit.d" ] || continue
            while IFS= read -r -d '' p; do
                log "kept $p: a drop-in of $unit (site settings: the install never writes $unit.d/)"
            done < <(find "${unit_dir%/}/$unit.d" -mindepth 1 -maxdepth 1 -print0 | sort -z)
        done
    fi
    if [ "${#foreign[@]}" != 0 ]; then
        log "kept what the install did not write in $prefix (not in its manifest):" \
            "${#foreign[@]} files, links and directories"
    fi
    log "manifest: $manifest (what the uninstall may remove)"
}

# -- uninstall ------------------------------------------------------------------------------
uninstall_node() {
    local p i kind removable=() left=() dirs=() unit_paths=() n
    absolute prefix
    manifest=${prefix%/}/$manifest_name
    if ! there "$prefix"; then
        log "nothing to remove: no $prefix"
        return 0
    fi
    sound_path "$prefix" || stop "PREFIX $prefix: $why"
    if [ -L "$prefix" ] || [ ! -d "$prefix" ]; then
        stop "PREFIX $prefix: not a directory (a link, or a file): not an install of install-node.sh"
    fi
    if ! there "$manifest"; then
        if [ -z "$(find "$prefix" -mindepth 1 -maxdepth 1 -print -quit)" ]; then
            log "nothing to remove: $prefix is empty"
            return 0
        fi
        stop "left $prefix: no $manifest: not an install of install-node.sh (its manifest lists what it wrote)"
    fi
    read_manifest "$manifest" || stop "$why"
    load_meta "$prefix" -mindepth 1
    for p in "${old_order[@]}"; do
        case $p in
        "$prefix"/*) ;;
        *)
            i=${p%/*}
            sound_path "${i:-/}" || stop "${i:-/} (holding $p): $why: another user could have put anything there"
            load_meta "$p" -maxdepth 0
            ;;
        esac
        case $p in */kata-mem.socket | */kata-mem.service) [ "${old_kind[$p]}" != f ] || unit_paths+=("$p") ;; esac
    done
    if [ "${#unit_paths[@]}" != 0 ] && [ "$systemctl" != - ] && [ -d /run/systemd/system ]; then
        "$systemctl" disable --now "${unit_names[@]}" >&2 || true
    fi
    # Files and links, each while it is as the install wrote it; then the directories it made,
    # deepest first, once empty.
    for ((i = ${#old_order[@]} - 1; i >= 0; i--)); do
        p=${old_order[$i]}
        kind=${old_kind[$p]}
        there "$p" || continue
        if [ "$kind" = d ]; then
            dirs+=("${#p}$tab$p")
        elif as_written "$p" && inside_sound "$p"; then
            removable+=("$p")
        else
            left+=("left $p: $why")
        fi
    done
    if [ "${#removable[@]}" != 0 ]; then
        printf '%s\0' "${removable[@]}" | xargs -0 rm -f --
    fi
    rm -f -- "$manifest"
    n=0
    for p in "${removable[@]}"; do
        case $p in "$prefix"/*) n=$((n + 1)) ;; *) log "removed $p" ;; esac
    done
    [ "$n" = 0 ] || log "removed $n files and links in $prefix"
    if [ "${#dirs[@]}" != 0 ]; then
        while IFS= read -r -d '' p; do
            p=${p#*"$tab"}
            if as_written "$p" && inside_sound "$p"; then
                rmdir -- "$p" 2>/dev/null || true
            fi
        done < <(printf '%s\0' "${dirs[@]}" | sort -z -rn)
    fi
    if there "$prefix"; then
        if [ -z "${old_kind[$prefix]+x}" ] && [ -z "$(find "$prefix" -mindepth 1 -maxdepth 1 -print -quit)" ]; then
            log "left $prefix: it was there before the install (now empty)"
        else
            # What is left in PREFIX: files changed since (named above) and what others added.
            while IFS= read -r -d '' p; do
                [ -n "${old_kind[$p]+x}" ] || left+=("left $p: not written by the install")
            done < <(find "$prefix" -mindepth 1 ! -type d -print0 | sort -z)
        fi
    else
        log "removed $prefix"
    fi
    # The units' drop-ins, and the links `systemctl enable` made: not the install's to
    # remove, named so that nothing stays unseen.
    for p in "${unit_paths[@]}"; do
        if [ -d "$p.d" ]; then
            while IFS= read -r -d '' i; do
                left+=("left $i: a drop-in of ${p##*/}, not written by the install (remove it by hand once ${p##*/} is gone for good)")
            done < <(find "$p.d" -mindepth 1 -maxdepth 1 -print0 | sort -z)
        fi
        while IFS= read -r -d '' i; do
            left+=("left $i: made by systemctl enable (systemctl disable ${p##*/} removes it)")
        done < <(find "${p%/*}" -mindepth 2 -maxdepth 2 -path "*.wants/${p##*/}" -print0 2>/dev/null | sort -z)
    done
    for p in "${left[@]:0:40}"; do log "$p"; done
    [ "${#left[@]}" -le 40 ] || log "... and $((${#left[@]} - 40)) more"
    if [ "${#unit_paths[@]}" != 0 ] && [ "$systemctl" != - ] && [ -d /run/systemd/system ]; then
        "$systemctl" daemon-reload >&2 || true
    fi
}

if [ "${1:-}" = --uninstall ]; then
    tag=uninstall-node
    nothing="nothing was removed"
    uninstall_node
else
    install_node "$@"
fi
