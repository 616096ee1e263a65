# shellcheck shell=bash disable=SC2054  # (cpu,cpuacct is one hierarchy name)
# guest_users.sh: source it inside a run.sh guest (bash; as root, the default).
#   source "$TB_VM_USERS"      # run.sh puts a copy at /run/vmres/guest_users.sh
# Owns the users and the cgroups a systemd host would give them: what logind,
# user@UID.service (Delegate=yes) and `systemd-run --user --scope` would make.
# There is no systemd in the guest, so these functions build the same
# directories with the same owners by hand.  The guest's /etc, /home and
# /run are tmpfs-backed: users and their files vanish at power-off.
#
# Functions (NAME is a user name; each prints only what is described):
#   tb_make_user NAME                  create the user (idempotent), prints nothing
#   tb_delegate_user NAME              v2 only: prints .../user@UID.service
#   tb_user_shell_leaf NAME            v2 only: prints a leaf with a user process in it
#   tb_user_fresh_scope NAME           v2 only: prints an empty user-owned scope
#   tb_user_login_scope NAME           prints a root-owned session-N.scope
#   tb_run_as_user NAME CGROUP CMD...  runs CMD as NAME inside CGROUP
#   tb_cleanup_user_procs NAME         kills the helpers the functions above started
# No `set -e` here: the caller's shell options are its own business.

_TB_CG=/sys/fs/cgroup
# the v1 hierarchies systemd places a session in (relative paths apply to each)
_TB_V1_HIERS=(systemd unified memory pids cpu,cpuacct)
_TB_STATE=/run/throwbox-vm-users     # helper pid lists, the session counter
_TB_CONTROLLERS=(memory pids cpu)    # what stage2.sh enables down user.slice

_tb_layout() {
  if [ -n "${TB_VM_LAYOUT:-}" ]; then echo "$TB_VM_LAYOUT"
  elif [ -e $_TB_CG/cgroup.controllers ]; then echo v2
  else echo v1; fi
}
_tb_uid() { id -u "$1" 2>/dev/null || { echo "guest_users: no user $1" >&2; return 1; }; }
_tb_home() { getent passwd "$1" | cut -d: -f6; }
# run a command with NAME's uid, gid and supplementary groups (no login, no PAM)
_tb_as() { local u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups "$@"; }
_tb_enable() { # cgroup-dir: enable the user-slice controllers for its children
  local c
  for c in "${_TB_CONTROLLERS[@]}"; do
    echo "+$c" >"$1/cgroup.subtree_control" || { echo "guest_users: cannot enable $c in $1" >&2; return 1; }
  done
}
_tb_need_v2() {
  [ "$(_tb_layout)" = v2 ] && return 0
  echo "guest_users: $1 needs --layout v2 (systemd delegates cgroup subtrees only on the unified hierarchy)" >&2
  return 1
}

# tb_make_user NAME
#   useradd -m with bash as the shell, plus /run/user/UID (mode 700, owned by
#   the user) as logind would create it at the first login. Idempotent.
tb_make_user() {
  local name=${1:?tb_make_user NAME} uid
  if ! id -u "$name" >/dev/null 2>&1; then
    useradd -m -U -s /bin/bash "$name" >/dev/null || return 1
  fi
  uid=$(_tb_uid "$name") || return 1
  install -d -m 700 -o "$uid" -g "$(id -g "$name")" "/run/user/$uid"
  mkdir -p $_TB_STATE
}

# tb_delegate_user NAME  (v2 only; returns 1 with a message on v1)
#   Builds user.slice/user-UID.slice/user@UID.service as systemd does for a
#   Delegate=yes unit: the directory and its cgroup.procs, cgroup.subtree_control
#   and cgroup.threads are chowned to the user; memory, pids and cpu are enabled
#   in user-UID.slice (by root) and in user@UID.service (by the user, as
#   `systemd --user` would); then the user creates app.slice with the same
#   controllers enabled, under which tb_user_shell_leaf / tb_user_fresh_scope
#   make their leaves. Idempotent. Prints the user@UID.service directory.
tb_delegate_user() {
  local name=${1:?tb_delegate_user NAME} uid slice svc
  _tb_need_v2 tb_delegate_user || return 1
  tb_make_user "$name" || return 1
  uid=$(_tb_uid "$name") || return 1
  slice=$_TB_CG/user.slice/user-$uid.slice
  svc=$slice/user@$uid.service
  mkdir -p "$svc" || return 1
  _tb_enable "$slice" || return 1
  chown "$uid:$(id -g "$name")" "$svc" "$svc/cgroup.procs" "$svc/cgroup.subtree_control" "$svc/cgroup.threads" || return 1
  # from here on as the user: proves the delegation is usable unprivileged
  _tb_as "$name" bash -c '
    for c in "${@:2}"; do echo "+$c" >"$1/cgroup.subtree_control" || exit 1; done
    mkdir -p "$1/app.slice" || exit 1
    for c in "${@:2}"; do echo "+$c" >"$1/app.slice/cgroup.subtree_control" || exit 1; done
  ' _ "$svc" "${_TB_CONTROLLERS[@]}" || { echo "guest_users: $name cannot use $svc" >&2; return 1; }
  echo "$svc"
}

# tb_user_shell_leaf NAME  (v2 only)
#   Like a terminal inside the user's session: the user creates
#   app.slice/shell-RANDOM.scope and a long-lived `sleep infinity` of the user
#   is put in it, so a process started there later shares the leaf (and may
#   not enable controllers in it: EBUSY). Prints the leaf directory.
#   tb_cleanup_user_procs NAME kills the sleep.
tb_user_shell_leaf() {
  local name=${1:?tb_user_shell_leaf NAME} svc leaf pid i uid gid home
  svc=$(tb_delegate_user "$name") || return 1
  leaf=$(_tb_new_leaf "$name" "$svc/app.slice" shell) || return 1
  uid=$(id -u "$name") gid=$(id -g "$name") home=$(_tb_home "$name")
  # no $(...) after the move, or its short-lived children pass through the
  # leaf; stdio away from the caller, whose $(...) would wait for the sleep
  ( echo $BASHPID >"$leaf/cgroup.procs" &&
    exec setpriv --reuid="$uid" --regid="$gid" --init-groups \
      env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" sleep infinity
  ) </dev/null >/dev/null 2>&1 &
  pid=$!
  echo "$pid" >>"$_TB_STATE/$name.pids"
  # the move happens in the background: return only once the leaf is populated
  for ((i = 0; i < 200; i++)); do
    grep -qx "$pid" "$leaf/cgroup.procs" 2>/dev/null && { echo "$leaf"; return 0; }
    sleep 0.05
  done
  echo "guest_users: helper $pid did not reach $leaf" >&2
  return 1
}

# tb_user_fresh_scope NAME  (v2 only)
#   Like `systemd-run --user --scope -p Delegate=yes`: a new, empty,
#   user-owned app.slice/run-RANDOM.scope. Prints its directory.
tb_user_fresh_scope() {
  local name=${1:?tb_user_fresh_scope NAME} svc
  svc=$(tb_delegate_user "$name") || return 1
  _tb_new_leaf "$name" "$svc/app.slice" run
}

_tb_new_leaf() { # NAME parent prefix: the user mkdirs parent/prefix-RANDOM.scope
  local d i
  for ((i = 0; i < 20; i++)); do
    d=$2/$3-$RANDOM.scope
    [ -e "$d" ] && continue
    _tb_as "$1" mkdir "$d" || { echo "guest_users: $1 cannot create $d" >&2; return 1; }
    echo "$d"; return 0
  done
  return 1
}

# tb_user_login_scope NAME
#   What a plain ssh login of a normal user gets from logind: a root-owned
#   user.slice/user-UID.slice/session-N.scope (N = 2, 3, ...; session-1 is the
#   command's own root login), nothing delegated. v2: prints the directory;
#   v1: creates the path in each of the systemd, unified, memory, pids and
#   cpu,cpuacct hierarchies and prints it relative to the hierarchy roots
#   (e.g. /user.slice/user-1000.slice/session-2.scope), the form
#   tb_run_as_user accepts.
tb_user_login_scope() {
  local name=${1:?tb_user_login_scope NAME} uid n rel h
  tb_make_user "$name" || return 1
  uid=$(_tb_uid "$name") || return 1
  n=$(( $(cat "$_TB_STATE/session" 2>/dev/null || echo 1) + 1 ))
  echo "$n" >"$_TB_STATE/session"
  rel=/user.slice/user-$uid.slice/session-$n.scope
  if [ "$(_tb_layout)" = v2 ]; then
    mkdir -p "$_TB_CG$rel" || return 1
    _tb_enable "$_TB_CG/user.slice/user-$uid.slice" || return 1
    echo "$_TB_CG$rel"
  else
    for h in "${_TB_V1_HIERS[@]}"; do
      [ -d "$_TB_CG/$h" ] && { mkdir -p "$_TB_CG/$h$rel" || return 1; }
    done
    echo "$rel"
  fi
}

# tb_run_as_user NAME CGROUP CMD [ARGS...]
#   Moves the current (sub)shell into CGROUP, as root, then execs
#   `setpriv --reuid --regid --init-groups env -i ... CMD ARGS`, with PATH,
#   HOME, USER, LOGNAME, SHELL, LANG, XDG_RUNTIME_DIR, TB_VM, TB_VM_LAYOUT and
#   TB_VM_USERS set. CGROUP is either a directory under /sys/fs/cgroup (v2, or
#   one v1 hierarchy) or a path relative to the hierarchy roots (v2: under
#   /sys/fs/cgroup; v1: moved in the systemd, unified, memory, pids and
#   cpu,cpuacct hierarchies).
#   It replaces the shell it runs in, so call it as `( tb_run_as_user ... )`,
#   `tb_run_as_user ... &` or inside $(...); called from the top level of a
#   script it runs itself in a subshell and returns CMD's status instead.
tb_run_as_user() {
  if [ "$BASHPID" = "$$" ]; then ( tb_run_as_user "$@" ); return; fi
  local name=${1:?tb_run_as_user NAME CGROUP CMD...} cg=${2:?tb_run_as_user NAME CGROUP CMD...} uid gid home layout h
  shift 2
  [ $# -gt 0 ] || { echo "guest_users: tb_run_as_user: no command" >&2; return 2; }
  uid=$(_tb_uid "$name") || return 1
  home=$(_tb_home "$name") gid=$(id -g "$name") layout=$(_tb_layout)
  # everything that forks is done above: after the move only CMD runs there
  case $cg in
    "$_TB_CG"/*) echo $BASHPID >"$cg/cgroup.procs" || return 1 ;;
    *) cg=/${cg#/}
       if [ "$layout" = v2 ]; then
         echo $BASHPID >"$_TB_CG$cg/cgroup.procs" || return 1
       else
         for h in "${_TB_V1_HIERS[@]}"; do
           [ -d "$_TB_CG/$h" ] || continue
           echo $BASHPID >"$_TB_CG/$h$cg/cgroup.procs" || return 1
         done
       fi ;;
  esac
  exec setpriv --reuid="$uid" --regid="$gid" --init-groups \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" USER="$name" LOGNAME="$name" \
    SHELL=/bin/bash LANG=C.UTF-8 XDG_RUNTIME_DIR="/run/user/$uid" \
    TB_VM=1 TB_VM_LAYOUT="$layout" TB_VM_USERS="${TB_VM_USERS:-}" "$@"
}

# tb_cleanup_user_procs NAME
#   Kills (SIGKILL) the helper processes the functions above started for NAME
#   (the shell leaves' sleeps) and waits until they are gone, so the caller
#   can then check that nothing else of NAME's is left. Cgroup directories
#   are left in place.
tb_cleanup_user_procs() {
  local name=${1:?tb_cleanup_user_procs NAME} uid f pid i left
  uid=$(_tb_uid "$name") || return 1
  f=$_TB_STATE/$name.pids
  [ -s "$f" ] || return 0
  while read -r pid; do
    # only if the pid still belongs to the user (pids are reused)
    [ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$uid" ] && kill -KILL "$pid" 2>/dev/null
  done <"$f"
  for ((i = 0; i < 100; i++)); do
    left=
    while read -r pid; do
      # a zombie is gone for this purpose: its parent reaps it later
      [ -e "/proc/$pid" ] && [ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$uid" ] &&
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] && left+=" $pid"
    done <"$f"
    [ -z "$left" ] && { rm -f "$f"; return 0; }
    sleep 0.05
  done
  echo "guest_users: $name's helpers still alive:$left" >&2
  return 1
}
