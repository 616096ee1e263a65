#!/bin/bash
# stage2.sh: guest PID 1 after switch_root (the host's own bash over the
# shared root).  run.sh copies it into the results share, /run/vmres.
# Owns what a systemd-booted Debian 12 host would have set up before a root
# login: the API file systems, the cgroup layout (v2 unified, or v1 the
# hybrid-legacy way systemd 252 mounts it with
# systemd.unified_cgroup_hierarchy=0), the login scope the command runs in,
# and the results (rc, dmesg, cgroups-after) written back before power-off.
# There is no systemd and no logind in the guest: this file imitates them.
# No `set -e`: if PID 1 exits the kernel panics and the results are lost, so
# every step reports its failure on the console and carries on instead.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
R=/run/vmres
CG=/sys/fs/cgroup
say() { echo "tb-vm stage2: $*" >/dev/console; }
off() { sync; echo o >/proc/sysrq-trigger; sleep 30; }
fatal() { say "$*"; echo "tb-vm stage2: $*" >"$R/stage2-error"; off; }

# guest uptime at each stage, for boot-time measurements (--keep copies it)
mark() { echo "$1 $(cut -d' ' -f1 /proc/uptime)" >>$R/timing; }
mark stage2
layout=$(cat $R/layout 2>/dev/null || echo v2)
session=/user.slice/user-0.slice/session-1.scope

# --- API file systems ------------------------------------------------------------
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=666 devpts /dev/pts
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
ln -sfn /proc/self/fd /dev/fd
ln -sfn /proc/self/fd/0 /dev/stdin; ln -sfn /proc/self/fd/1 /dev/stdout; ln -sfn /proc/self/fd/2 /dev/stderr
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm
mount -t mqueue -o nosuid,nodev,noexec mqueue /dev/mqueue 2>/dev/null || say "no mqueue"
mount -t securityfs -o nosuid,nodev,noexec securityfs /sys/kernel/security 2>/dev/null || say "no securityfs"
# /tmp and /run are fresh tmpfs already (init.sh); these are what tmpfiles.d makes
mkdir -p /run/lock /run/user /var/tmp
chmod 1777 /run/lock /var/tmp 2>/dev/null
echo tbvm >/proc/sys/kernel/hostname
ip link set lo up 2>/dev/null || say "cannot bring lo up"

# --- cgroups -----------------------------------------------------------------------
# hierarchies the login session is placed in (v1: relative to each mount)
# shellcheck disable=SC2054  # cpu,cpuacct is one hierarchy name
v1_session_hiers=(systemd unified memory pids cpu,cpuacct)

setup_v2() {
  # systemd 252 mounts the unified hierarchy with these options
  mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 $CG ||
    fatal "mount cgroup2 failed"
  mkdir $CG/init.scope $CG/system.slice
  echo $$ >$CG/init.scope/cgroup.procs
  # PID 1 left the root, so the root may now delegate every controller
  local c
  for c in $(cat $CG/cgroup.controllers); do
    echo "+$c" >$CG/cgroup.subtree_control || say "cannot enable $c at the root"
  done
  mkdir -p "$CG$session"
  # memory/pids accounting is on by default in systemd 252; cpu as on a host
  # where CPUAccounting or a CPUWeight is set for the user slices
  local d
  for d in user.slice user.slice/user-0.slice; do
    for c in memory pids cpu; do
      echo "+$c" >"$CG/$d/cgroup.subtree_control" || say "cannot enable $c in $d"
    done
  done
}

setup_v1() {
  # the tmpfs systemd puts at /sys/fs/cgroup (TMPFS_LIMITS_SYS_FS_CGROUP)
  mount -t tmpfs -o nosuid,nodev,noexec,strictatime,mode=755,size=4m,nr_inodes=1k tmpfs $CG ||
    fatal "mount tmpfs on $CG failed"
  mkdir $CG/unified $CG/systemd
  # hybrid: the unified hierarchy exists but holds no controllers (all bound to v1)
  mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 $CG/unified ||
    fatal "mount cgroup2 on $CG/unified failed"
  # systemd tries with xattr first (for its unit xattrs), then without
  mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd,xattr cgroup $CG/systemd 2>/dev/null ||
    mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd cgroup $CG/systemd ||
    fatal "mount name=systemd failed"
  # one mount per enabled controller, except systemd's default JoinControllers
  # pairs, which share a mount plus a symlink per member
  local c name done=" "
  for c in $(awk 'NR > 1 && $4 == 1 { print $1 }' /proc/cgroups); do
    case $c in
      cpu|cpuacct) name=cpu,cpuacct ;;
      net_cls|net_prio) name=net_cls,net_prio ;;
      *) name=$c ;;
    esac
    case $done in *" $name "*) continue ;; esac
    done="$done$name "
    mkdir "$CG/$name"
    mount -t cgroup -o "nosuid,nodev,noexec,$name" cgroup "$CG/$name" || { say "cannot mount v1 $name"; continue; }
    if [ "$name" != "$c" ]; then
      local m
      for m in ${name//,/ }; do ln -s "$name" "$CG/$m"; done
    fi
  done
  mount -o remount,ro,nosuid,nodev,noexec,strictatime,mode=755,size=4m,nr_inodes=1k $CG ||
    say "cannot remount $CG read-only"
  local h
  for h in "${v1_session_hiers[@]}"; do
    [ -d "$CG/$h" ] || { say "no v1 hierarchy $h"; continue; }
    mkdir -p "$CG/$h/init.scope" "$CG/$h/system.slice" "$CG/$h$session"
    echo $$ >"$CG/$h/init.scope/cgroup.procs" || say "cannot move PID 1 in $h"
  done
}

mark cgroups
case $layout in
  v2) setup_v2 ;;
  v1) setup_v1 ;;
  *) fatal "unknown layout $layout" ;;
esac

# --- the command ---------------------------------------------------------------------
out=/dev/console
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = tb.out ] && out=/dev/${p##*/}
done
[ "$out" = /dev/console ] && say "no tb.out port: command output goes to the console"
cwd=$(cat $R/cwd)
envs=()
[ -s $R/env ] && mapfile -d '' -t envs <$R/env

mark command
(
  if [ "$layout" = v2 ]; then
    echo $BASHPID >"$CG$session/cgroup.procs"
  else
    for h in "${v1_session_hiers[@]}"; do
      [ -d "$CG/$h" ] && echo $BASHPID >"$CG/$h$session/cgroup.procs"
    done
  fi
  cd "$cwd" || exit 125
  # a login session of its own, like sshd gives; stdin /dev/null
  exec env -i PATH="$PATH" HOME=/root LANG=C.UTF-8 TB_VM=1 TB_VM_LAYOUT="$layout" \
    TB_VM_USERS=$R/guest_users.sh "${envs[@]}" setsid -w /bin/bash $R/cmd.sh </dev/null
) >"$out" 2>&1
rc=$?
mark done

# --- results -----------------------------------------------------------------------
echo $rc >$R/rc.tmp && mv $R/rc.tmp $R/rc
dmesg >$R/dmesg 2>&1
# every cgroup directory of every hierarchy, with the pids still in it, so the
# caller can check for leftovers ("hierarchy:path<TAB>pids")
# The root (kernel threads) and init.scope (this listing itself) get no pids.
list_cgroups() { # hierarchy-name mountpoint
  local d rel pids
  find "$2" -type d | sort | while read -r d; do
    rel=${d#"$2"}; rel=${rel:-/}; pids=()
    case $rel in /|/init.scope) ;; *) mapfile -t pids <"$d/cgroup.procs" 2>/dev/null ;; esac
    printf '%s:%s\t%s\n' "$1" "$rel" "${pids[*]}"
  done
}
if [ "$layout" = v2 ]; then
  list_cgroups unified $CG
else
  for h in $CG/*; do
    [ -L "$h" ] || list_cgroups "${h##*/}" "$h"
  done
fi >$R/cgroups-after
off
