#!/bin/sh
# init.sh: stage 1, /init of the initramfs build.sh makes (busybox sh).
# Owns the guest's root: this machine's / (9p tag tbroot, read-only) under a
# tmpfs overlay, the results share (tag tbres, read-write) at /run/vmres and
# the working directory (tag tbwork, read-write) at the path named in
# /run/vmres/workdir.  Then switch_roots into stage 2, the host's own bash
# running /run/vmres/stage2.sh as PID 1.
PATH=/bin
die() { echo "tb-vm init: $*" >/dev/console; echo o >/proc/sysrq-trigger; sleep 5; poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo 1 >/proc/sys/kernel/sysrq
while read -r m; do insmod "/modules/$m" || die "insmod $m failed"; done </modules/load
# virtio devices are probed asynchronously after insmod: retry each 9p mount
# for a few seconds instead of guessing when the tag exists
mount9p() { # tag dir options
  i=0
  until mount -t 9p -o "trans=virtio,version=9p2000.L,msize=512000,$3" "$1" "$2" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 200 ] && die "cannot mount 9p tag $1"; sleep 0.05
  done
}
# cache=loose is safe for the root only because it is read-only for both sides
# during the run; the shares use cache=mmap/none so host and guest agree
mount9p tbroot /lower ro,cache=loose
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || die "mount overlay"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /newroot/tmp
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /newroot/run
mkdir -p /newroot/run/vmres
mount9p tbres /newroot/run/vmres cache=none
if [ -s /newroot/run/vmres/workdir ]; then
  w=$(cat /newroot/run/vmres/workdir)
  mkdir -p "/newroot$w" || die "cannot create $w"
  mount9p tbwork "/newroot$w" cache=mmap
fi
for d in proc sys dev; do mount --move "/$d" "/newroot/$d"; done
[ -x /newroot/bin/bash ] || die "no /bin/bash in the shared root"
exec switch_root /newroot /bin/bash /run/vmres/stage2.sh
