#!/usr/bin/env bash
# run.sh: boots the kernel build.sh prepared over this machine's own / and
# runs one shell COMMAND in it as root, inside a systemd-like cgroup layout.
# Owns the host side of a run: the qemu process, the per-run results share
# and the live output stream; nothing of a run outlives it on the host.
#
# Usage: run.sh [options] 'COMMAND'     ('-' reads the command from stdin)
#   --layout v2|v1  cgroup layout (default v2): v2 = pure cgroup2, as
#                   systemd 252 with systemd.unified_cgroup_hierarchy=1;
#                   v1 = its hybrid-legacy layout with ...=0
#   -C DIR          working directory, shared read-write at the same path
#                   (default: the current directory; created if missing).
#                   The rest of / is a read-only view under a tmpfs overlay
#                   whose writes vanish at power-off.
#   -t SECS         kill the guest after SECS seconds: exit 124 (default 1800)
#   -m MEM          guest memory (default 4G)
#   -c CPUS         vCPUs (default 2)
#   --env K=V       extra environment variable for the command (repeatable)
#   --keep DIR      copy console.log, dmesg, rc, cgroups-after and timing
#                   (guest uptime at each stage) to DIR
#   --tcg | --kvm   force the accelerator (default: what build.sh probed)
#   -h, --help      this text
# Env: THROWBOX_VM_CACHE (default /var/tmp/throwbox-vm),
#      THROWBOX_VM_APPEND (extra kernel command line).
# Exit: the command's status; 124 timeout; 125 the guest never ran it.
# Output: the command's stdout+stderr, live, on run.sh's stdout. Inside, the
# command sees TB_VM=1, TB_VM_LAYOUT and TB_VM_USERS (guest_users.sh's path).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${THROWBOX_VM_CACHE:-/var/tmp/throwbox-vm}
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
bad() { echo "run.sh: $*" >&2; echo "usage: run.sh [options] 'COMMAND' (--help)" >&2; exit 2; }

layout=v2 cwd=$PWD tmo=1800 mem=4G cpus=2 keep= accel= envs=()
while [ $# -gt 0 ]; do
  case $1 in
    --layout) [ $# -ge 2 ] || bad "--layout needs v2 or v1"; layout=$2; shift ;;
    -C) [ $# -ge 2 ] || bad "-C needs a directory"; cwd=$2; shift ;;
    -t) [ $# -ge 2 ] || bad "-t needs seconds"; tmo=$2; shift ;;
    -m) [ $# -ge 2 ] || bad "-m needs a size"; mem=$2; shift ;;
    -c) [ $# -ge 2 ] || bad "-c needs a count"; cpus=$2; shift ;;
    --env) [ $# -ge 2 ] || bad "--env needs K=V"; [[ $2 == [A-Za-z_]*=* ]] || bad "--env $2: not K=V"
           envs+=("$2"); shift ;;
    --keep) [ $# -ge 2 ] || bad "--keep needs a directory"; keep=$2; shift ;;
    --tcg) accel=tcg ;;
    --kvm) accel=kvm ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -) break ;;
    -*) bad "unknown option $1" ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 1 ] || bad "no COMMAND"
case $layout in v1|v2) ;; *) bad "--layout must be v2 or v1" ;; esac
[[ $tmo =~ ^[0-9]+$ ]] || bad "-t $tmo: not a number of seconds"
[ -s "$cache/initramfs.cpio.gz" ] && [ -e "$cache/vmlinuz" ] ||
  { echo "run.sh: nothing built in $cache: run $here/build.sh first" >&2; exit 125; }
mkdir -p "$cwd"
cwd=$(cd "$cwd" && pwd -P)   # the guest mounts the share at this exact path

# --- per-run state, removed on every way out ---------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/throwbox-vm.XXXXXX")
res=$tmp/res            # shared with the guest (tag tbres)
fifo=$tmp/out.fifo      # the virtio serial port's host end
qpid= cpid= signalled=
cleanup() {
  local p
  for p in $qpid $cpid; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $qpid $cpid; do wait "$p" 2>/dev/null || true; done
  if [ -n "$keep" ]; then
    mkdir -p "$keep"
    for p in console.log dmesg rc cgroups-after timing cmd.sh stage2-error; do
      [ -e "$res/$p" ] && cp "$res/$p" "$keep/"
    done
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# a signal only stops qemu; the main flow then sees it gone and exits 128+n
for s in INT TERM HUP; do
  # shellcheck disable=SC2064  # $s is meant to expand now
  trap "signalled=$s; [ -n \"\$qpid\" ] && kill -TERM \$qpid 2>/dev/null" "$s"
done

mkdir "$res"
if [ "$1" = - ]; then cat >"$res/cmd.sh"; else printf '%s\n' "$*" >"$res/cmd.sh"; fi
cp "$here/stage2.sh" "$here/guest_users.sh" "$res/"
echo "$layout" >"$res/layout"
echo "$cwd" >"$res/cwd"
[ ${#envs[@]} -gt 0 ] && printf '%s\0' "${envs[@]}" >"$res/env"
chmod 755 "$tmp" "$res"
mkfifo "$fifo"

[ -n "$accel" ] || accel=$(cat "$cache/accel" 2>/dev/null || echo tcg)
# shellcheck disable=SC2054  # (here and below: qemu option values contain commas)
if [ "$accel" = kvm ]; then machine=(-machine q35,accel=kvm -cpu host)
else machine=(-machine q35 -accel tcg,thread=multi -cpu max); fi

# as root, passthrough keeps owners and modes as the guest sets them; as a
# normal user qemu cannot chown, so the guest sees (and makes) plain files
secm=passthrough; [ "$(id -u)" -eq 0 ] || secm=none
# shellcheck disable=SC2054
share=(-fsdev "local,id=root,path=/,security_model=$secm,readonly=on,multidevs=remap"
       -device virtio-9p-pci,fsdev=root,mount_tag=tbroot
       -fsdev "local,id=res,path=$res,security_model=$secm"
       -device virtio-9p-pci,fsdev=res,mount_tag=tbres)
if [ "$cwd" != / ]; then
  echo "$cwd" >"$res/workdir"
  # shellcheck disable=SC2054
  share+=(-fsdev "local,id=work,path=$cwd,security_model=$secm,multidevs=remap"
          -device virtio-9p-pci,fsdev=work,mount_tag=tbwork)
fi
case $layout in
  v2) cg_append="cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1" ;;
  v1) cg_append="systemd.unified_cgroup_hierarchy=0" ;;
esac
append="console=ttyS0 loglevel=4 quiet panic=-1 rdinit=/init $cg_append ${THROWBOX_VM_APPEND:-}"

# cat copies the port to our stdout as bytes arrive (and shares our stdout's
# file offset, unlike qemu reopening a path); it ends when qemu closes the fifo
cat "$fifo" & cpid=$!
rc=0
# timeout(1) puts qemu in its own process group: a terminal's Ctrl-C reaches
# only this script, whose trap stops qemu
timeout -k 5 "$tmo" qemu-system-x86_64 "${machine[@]}" -smp "$cpus" -m "$mem" \
  -nodefaults -no-user-config -display none -no-reboot -nic none \
  -kernel "$cache/vmlinuz" -initrd "$cache/initramfs.cpio.gz" -append "$append" \
  -serial "file:$res/console.log" \
  -device virtio-serial-pci -chardev "file,id=tbout,path=$fifo" \
  -device virtserialport,chardev=tbout,name=tb.out \
  "${share[@]}" </dev/null >"$tmp/qemu.err" 2>&1 & qpid=$!
# wait returns early when a trapped signal arrives: keep waiting until qemu is gone
while :; do
  rc=0; wait "$qpid" || rc=$?
  kill -0 "$qpid" 2>/dev/null || break
done
qpid=
# let cat drain the port; if qemu died before opening the fifo, cat never will end
for _ in $(seq 50); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.05; done
kill "$cpid" 2>/dev/null || true; wait "$cpid" 2>/dev/null || true; cpid=

if [ -n "$signalled" ]; then
  echo "run.sh: interrupted (SIG$signalled): guest stopped" >&2
  case $signalled in INT) exit 130 ;; TERM) exit 143 ;; HUP) exit 129 ;; esac
fi
if [ -s "$res/rc" ]; then exit "$(cat "$res/rc")"; fi
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "run.sh: timed out after ${tmo}s; guest killed" >&2; exit 124
fi
echo "run.sh: the guest did not run the command (qemu exit $rc)" >&2
[ -s "$tmp/qemu.err" ] && sed 's/^/run.sh: qemu: /' "$tmp/qemu.err" >&2
[ -s "$res/stage2-error" ] && cat "$res/stage2-error" >&2
if [ -s "$res/console.log" ]; then
  echo "run.sh: console tail:" >&2; tail -n 30 "$res/console.log" >&2
fi
exit 125
