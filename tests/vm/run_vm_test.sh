#!/usr/bin/env bash
# run_vm_test.sh: runs one test binary inside a qemu VM (TCG, no KVM needed) that boots Debian's
# cloud kernel, for kernel features the host may lack (kTLS: net/tls/tls.ko). The kernel package
# is the one linux-image-cloud-amd64 depends on, fetched once with apt-get into the cache folder;
# the initramfs holds busybox, a generated /init, the binary, extra files, every shared library
# ldd finds for them (same absolute paths, so rpaths keep working) and the kernel modules asked
# for plus their modinfo dependencies, loaded in dependency order with busybox insmod.
#
# Usage: run_vm_test.sh --cache DIR --work DIR [--module NAME]... [--optional-module NAME]...
#            [--file SRC[:DEST]]... [--append KERNEL_ARGS] [--timeout S] [--memory MB]
#            [--smp N] -- BINARY [ARGS...]
#   --cache   kernel package cache, kept across runs (CMake passes <build>/vm-cache)
#   --work    scratch: initramfs tree, initrd, serial.log (rebuilt on every run)
#   --module  a module that must load (default: tls); --optional-module: loaded when present
#   --file    extra file copied into the VM, by default to /test/<name>; the binary runs in /test
#   --smp     virtual CPUs (default 1; a multi-shard test wants one per shard)
# Exit: 0 when the binary exited 0 in the VM; 1 on any failure (the serial log is printed);
# 77 (skip) only outside CI (CI unset or not "true") and only when apt cannot fetch the kernel.
set -euo pipefail

readonly META_PKG=linux-image-cloud-amd64
# Crypto the tls/ layer needs: AES-GCM and ChaCha20-Poly1305 templates and their fast paths.
# They are optional here: a missing one shows up as a failed or skipped check in the test binary.
DEFAULT_OPTIONAL_MODULES=(gcm ctr ghash-generic ghash-clmulni-intel aesni-intel chacha20poly1305
    chacha_generic chacha-x86_64 poly1305_generic poly1305-x86_64)
cache="" work="" timeout_s=240 memory_mb=512 append="" smp=1
required_modules=(tls)
optional_modules=("${DEFAULT_OPTIONAL_MODULES[@]}")
extra_files=()

die() {
    echo "run_vm_test: FAIL: $*" >&2
    exit 1
}

usage() {
    sed -n '9,18p' "$0" >&2
    exit 1
}

while [[ $# -gt 0 ]]; do
    case $1 in
    --cache) cache=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --module) required_modules+=("$2"); shift 2 ;;
    --optional-module) optional_modules+=("$2"); shift 2 ;;
    --file) extra_files+=("$2"); shift 2 ;;
    --append) append=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --memory) memory_mb=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
    esac
done
[[ -n $cache && -n $work && $# -ge 1 ]] || usage
[[ $smp =~ ^[1-9][0-9]*$ ]] || die "--smp wants a positive number, not '$smp'"
binary=$1
shift
binary_args=("$@")
[[ -f $binary && -x $binary ]] || die "test binary '$binary' is missing or not executable"

# Tools. qemu, busybox and cpio come from the project's package list (qemu-system-x86,
# busybox-static, cpio); a machine without them is misconfigured, so this fails, never skips.
for tool in qemu-system-x86_64 busybox cpio gzip dpkg-deb apt-get apt-cache objcopy ldd timeout \
    flock; do
    command -v "$tool" >/dev/null ||
        die "'$tool' not found: apt-get install qemu-system-x86 busybox-static cpio binutils"
done

# Cannot fetch the kernel: fail in CI, skip (77) on a developer machine without apt access.
kernel_unavailable() {
    echo "run_vm_test: cannot obtain the kernel package: $*" >&2
    if [[ ${CI:-} == true ]]; then
        die "CI=true: the kTLS VM test must run (is Debian apt reachable?)"
    fi
    echo "run_vm_test: SKIP (not CI): apt cannot reach the kernel package" >&2
    exit 77
}

# The concrete package behind the metapackage, e.g. linux-image-6.1.0-57-cloud-amd64. Never a
# glob: every linux-image-*-cloud-amd64 would be ~2 GB.
resolve_kernel_pkg() {
    apt-cache depends "$META_PKG" 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'
}

# Downloads one package's .deb into folder $2. Returns apt-get's status.
download_pkg() {
    local sandbox=()
    # apt's _apt user cannot write into a build folder; as root, download as root (no warning).
    if [[ $(id -u) == 0 ]]; then sandbox=(-o APT::Sandbox::User=root); fi
    (cd "$2" && apt-get download -q "${sandbox[@]}" "$1" >&2)
}

# Downloads and unpacks the package into $cache/<pkg>/ (atomically: a temp dir, then mv) and
# drops older kernels from the cache. Sets kernel_tree.
fetch_kernel() {
    local pkg tmp updated=no
    pkg=$(resolve_kernel_pkg)
    if [[ -z $pkg && $(id -u) == 0 ]]; then
        apt-get update -qq >&2 || true # a fresh machine may have no package lists yet
        updated=yes
        pkg=$(resolve_kernel_pkg)
    fi
    if [[ -z $pkg ]]; then
        # No package lists (or no apt access): an earlier run's kernel is still good.
        kernel_tree=$(find "$cache" -mindepth 2 -maxdepth 2 -name .complete -printf '%h\n' |
            sort | tail -n 1)
        [[ -n $kernel_tree ]] || kernel_unavailable "apt-cache knows no $META_PKG"
        echo "run_vm_test: apt-cache knows no $META_PKG; reusing cached $kernel_tree" >&2
        return
    fi
    kernel_tree=$cache/$pkg
    [[ -f $kernel_tree/.complete ]] && return
    echo "run_vm_test: downloading $pkg into $cache" >&2
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
    if ! download_pkg "$pkg" "$tmp" && [[ $updated == no && $(id -u) == 0 ]]; then
        # Stale lists name a kernel the mirror dropped after a security update: refresh once.
        apt-get update -qq >&2 || true
        pkg=$(resolve_kernel_pkg)
        kernel_tree=$cache/$pkg
        if [[ -n $pkg && -f $kernel_tree/.complete ]]; then
            rm -rf "$tmp"
            return
        fi
        if [[ -n $pkg ]]; then download_pkg "$pkg" "$tmp" || true; fi
    fi
    if ! compgen -G "$tmp/${pkg}_*.deb" >/dev/null; then
        rm -rf "$tmp"
        kernel_unavailable "apt-get download ${pkg:-$META_PKG} failed"
    fi
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/tree" || die "dpkg-deb -x failed on $pkg"
    touch "$tmp/tree/.complete"
    rm -rf "$kernel_tree"
    mv "$tmp/tree" "$kernel_tree"
    rm -rf "$tmp"
    find "$cache" -mindepth 1 -maxdepth 1 -name 'linux-image-*' ! -name "$pkg" -exec rm -rf {} +
}

mkdir -p "$cache" "$work"
cache=$(cd "$cache" && pwd)
work=$(cd "$work" && pwd)
exec 9>"$cache/.lock"
flock 9 # two builds sharing one cache must not unpack over each other
kernel_tree=""
fetch_kernel
vmlinuz=$(find "$kernel_tree/boot" -name 'vmlinuz-*' | head -n 1)
kmods=$(find "$kernel_tree/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n 1)
[[ -n $vmlinuz && -n $kmods ]] || die "$kernel_tree has no boot/vmlinuz-* or lib/modules/<ver>"
echo "run_vm_test: kernel $(basename "$vmlinuz")" >&2

root=$work/root
rm -rf "$root"
mkdir -p "$root"/{bin,dev,etc,proc,sys,tmp,test,lib/modules}
ln -s bin "$root/sbin"

# Shared libraries: whatever ldd resolves (the dynamic loader included), copied to the same
# absolute path; their folders also go into LD_LIBRARY_PATH in case ldd found one through
# ld.so.cache, which the initramfs does not have.
declare -A lib_dirs=()
collect_libs() {
    local f=$1 lib
    [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] || return 0
    if ldd "$f" 2>/dev/null | grep -q 'not found'; then
        die "ldd $f: $(ldd "$f" | grep 'not found' | tr '\n' ' ')"
    fi
    while read -r lib; do
        [[ -e $root$lib ]] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
        lib_dirs[$(dirname "$lib")]=1
    done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3; next }
                                         $1 ~ /^\// { print $1 }')
}

busybox=$(command -v busybox)
cp -L "$busybox" "$root/bin/busybox"
collect_libs "$busybox"
for applet in $("$busybox" --list); do
    [[ -e $root/bin/$applet ]] || ln -s busybox "$root/bin/$applet"
done
binary_name=$(basename "$binary")
cp -L "$binary" "$root/test/$binary_name"
collect_libs "$binary"
for spec in "${extra_files[@]}"; do
    src=${spec%%:*}
    dest=/test/$(basename "$src")
    [[ $spec == *:* ]] && dest=${spec#*:}
    [[ -e $src ]] || die "--file $src does not exist"
    mkdir -p "$root$(dirname "$dest")"
    cp -aL "$src" "$root$dest"
    if [[ -f $src ]]; then collect_libs "$src"; fi
done
# Console for /init's output: the kernel opens /dev/console before devtmpfs is mounted (without
# root, /init reopens it after mounting devtmpfs and only its first lines are lost).
if [[ $(id -u) == 0 ]]; then mknod "$root/dev/console" c 5 1; fi

# Kernel modules: names are normalised to underscores as modinfo's name= and depends= use them.
declare -A mod_file=() mod_builtin=() mod_state=()
mod_order=()
while IFS= read -r -d '' f; do
    n=${f##*/}
    n=${n%%.ko*}
    mod_file[${n//-/_}]=$f
done < <(find "$kmods/kernel" -name '*.ko*' -print0)
if [[ -f $kmods/modules.builtin ]]; then
    while read -r p; do
        n=${p##*/}
        n=${n%%.ko*}
        mod_builtin[${n//-/_}]=1
    done <"$kmods/modules.builtin"
fi

# Copies one module, uncompressed (busybox insmod may not decompress), into the initramfs.
mod_unpack() {
    local src=$1 dst=$2
    case $src in
    *.ko) cp "$src" "$dst" ;;
    *.ko.xz) xz -dc "$src" >"$dst" ;;
    *.ko.zst) zstd -qdc "$src" >"$dst" ;;
    *.ko.gz) gzip -dc "$src" >"$dst" ;;
    *) die "unknown module compression: $src" ;;
    esac
}

# Depth-first over modinfo depends=; appends "name need" to mod_order after its dependencies.
mod_visit() {
    local n=${1//-/_} need=$2 dst info dep
    case ${mod_state[$n]:-} in
    done) return 0 ;;
    visiting) die "module dependency cycle through $n" ;;
    esac
    if [[ -n ${mod_builtin[$n]:-} ]]; then
        mod_state[$n]=done
        return 0
    fi
    if [[ -z ${mod_file[$n]:-} ]]; then
        [[ $need == required ]] && die "module $n is neither built in nor in $(basename "$kmods")"
        echo "run_vm_test: optional module $n not in this kernel" >&2
        mod_state[$n]=done
        return 0
    fi
    mod_state[$n]=visiting
    dst=$root/lib/modules/$n.ko
    mod_unpack "${mod_file[$n]}" "$dst"
    info=$work/modinfo.bin
    objcopy -O binary --only-section=.modinfo "$dst" "$info"
    for dep in $(tr '\0' '\n' <"$info" | sed -n 's/^depends=//p' | tr ',' ' '); do
        mod_visit "$dep" "$need"
    done
    mod_state[$n]=done
    mod_order+=("$n $need")
}
for m in "${required_modules[@]}"; do mod_visit "$m" required; done
for m in "${optional_modules[@]}"; do mod_visit "$m" optional; done
printf '%s\n' "${mod_order[@]}" >"$root/etc/modules.list"

# /init: prints HDVM-* marker lines the host side parses. /tmp is the initramfs's own (writable)
# directory, not a tmpfs over it: a --file copied to its absolute path under /tmp (a build tree
# there, as a CI clone in /tmp has) must stay visible. poweroff -f ends the VM; should it
# fail, init exits, the kernel panics, panic=-1 reboots and -no-reboot stops qemu.
ld_path=$(printf '%s\n' "${!lib_dirs[@]}" | sort | paste -sd: -)
{
    echo '#!/bin/sh'
    echo 'export PATH=/bin'
    echo 'mount -t devtmpfs devtmpfs /dev'
    echo 'exec </dev/console >/dev/console 2>&1'
    echo 'mount -t proc proc /proc'
    echo 'mount -t sysfs sysfs /sys'
    echo 'ip link set lo up || echo "HDVM-FAIL lo did not come up"'
    echo 'while read -r name need; do'
    echo '    if insmod "/lib/modules/$name.ko"; then echo "HDVM-MODULE loaded $name"'
    echo '    elif [ "$need" = required ]; then echo "HDVM-FAIL module $name did not load"'
    echo '    else echo "HDVM-MODULE optional $name did not load"; fi'
    echo 'done </etc/modules.list'
    echo 'echo "HDVM-START $(uname -r)"'
    echo "cd /test"
    printf 'LD_LIBRARY_PATH=%q ./%q' "$ld_path" "$binary_name"
    if [[ ${#binary_args[@]} -gt 0 ]]; then printf ' %q' "${binary_args[@]}"; fi
    echo
    echo 'echo "HDVM-EXIT $?"'
    echo 'poweroff -f'
} >"$root/init"
chmod 755 "$root/init"

initrd=$work/initrd.gz
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$initrd"
echo "run_vm_test: initrd $(du -h "$initrd" | cut -f1), modules: ${mod_order[*]%% *}" >&2

log=$work/serial.log
rm -f "$log"
qemu_rc=0
timeout -k 10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -m "$memory_mb" -smp "$smp" \
    -nodefaults -no-user-config -display none -monitor none -serial "file:$log" -no-reboot \
    -kernel "$vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 $append" </dev/null >"$work/qemu.out" 2>&1 ||
    qemu_rc=$?

# Verdict: every marker must be there; the binary's exit code decides.
fail_with_log() {
    echo "run_vm_test: FAIL: $*" >&2
    echo "----- qemu output -----" >&2
    cat "$work/qemu.out" >&2 || true
    echo "----- VM serial log ($log) -----" >&2
    tr -d '\r' <"$log" >&2 || true
    exit 1
}
[[ -f $log ]] || fail_with_log "qemu wrote no serial log (exit $qemu_rc)"
out=$(tr -d '\r' <"$log")
# The binary's own lines, so a passing ctest -V run shows what was checked.
sed -n '/^HDVM-START/,/^HDVM-EXIT/p' <<<"$out"
[[ $qemu_rc == 124 || $qemu_rc == 137 ]] && fail_with_log "VM timed out after $timeout_s s"
[[ $qemu_rc == 0 ]] || fail_with_log "qemu exited with $qemu_rc"
grep -q '^HDVM-FAIL' <<<"$out" && fail_with_log "$(grep '^HDVM-FAIL' <<<"$out" | head -n 1)"
grep -q '^HDVM-START' <<<"$out" || fail_with_log "/init never reached the test binary"
exit_line=$(grep -m 1 '^HDVM-EXIT ' <<<"$out") ||
    fail_with_log "the test binary did not finish (crash or kernel panic?)"
rc=${exit_line#HDVM-EXIT }
[[ $rc == 0 ]] || fail_with_log "$binary_name exited with $rc inside the VM"
echo "run_vm_test: ok: $binary_name passed inside the VM"
