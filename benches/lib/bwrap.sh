# The benchmarks' bwrap baseline, built in one place. Source this file, then
#   bwrap_baseline [--etc] [--cwd DIR]
# sets the array BWRAP to `bwrap --unshare-all --die-with-parent
# --new-session` with /usr read-only, the host's /bin, /sbin and /lib*
# entries as the host has them (symlinks or directories), with --etc the
# /etc entries cordon binds by default, a tmpfs /tmp, a fresh /proc and a
# minimal /dev, and with --cwd DIR that directory read-only as the working
# directory. Append the command to run. For a single string: "${BWRAP[*]}".
bwrap_baseline() {
  local etc=0 cwd="" d f
  while [ $# -gt 0 ]; do
    case "$1" in
      --etc) etc=1; shift ;;
      --cwd) cwd=$2; shift 2 ;;
      *) echo "bwrap_baseline: unknown option $1" >&2; return 2 ;;
    esac
  done
  BWRAP=(bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr)
  for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [ -L "$d" ]; then
      BWRAP+=(--symlink "$(readlink "$d")" "$d")
    elif [ -d "$d" ]; then
      BWRAP+=(--ro-bind "$d" "$d")
    fi
  done
  if [ "$etc" = 1 ]; then
    for f in ld.so.cache ld.so.conf ld.so.conf.d alternatives ssl ca-certificates \
             ca-certificates.conf pki crypto-policies localtime protocols services mime.types; do
      if [ -e "/etc/$f" ] || [ -L "/etc/$f" ]; then
        BWRAP+=(--ro-bind-try "/etc/$f" "/etc/$f")
      fi
    done
  fi
  BWRAP+=(--tmpfs /tmp --proc /proc --dev /dev)
  if [ -n "$cwd" ]; then
    BWRAP+=(--ro-bind "$cwd" "$cwd" --chdir "$cwd")
  fi
}
