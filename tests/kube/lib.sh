# tests/kube/lib.sh — shared by tests/kube/up and tests/kube/down (sourced, not run).
# Names, ports and paths of the single-node test cluster live here, once.

kube_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${BERTH_KUBE_DIR:-/tmp/berth-kube}
case "$D" in
/?*) ;;
*)
	echo "tests/kube: BERTH_KUBE_DIR must be an absolute path, not '$D'" >&2
	exit 2
	;;
esac
D=${D%/}
[[ "$D" != / && -n "$D" ]] || {
	echo "tests/kube: BERTH_KUBE_DIR must not be /" >&2
	exit 2
}

node=berth-kube-node
bridge=berthkube0
pod_subnet=10.244.77.0/24
service_range=10.96.0.0/16
service_ip=10.96.0.1
apiserver_port=16443
etcd_client_port=23790
etcd_peer_port=23800
kubelet_port=10250
kubelet_healthz_port=10248
cm_port=10257
scheduler_port=10259
pause_image=berth.local/pause:1
sock=$D/containerd/containerd.sock

# The programs this cluster runs, in the order they start; down stops them in reverse.
daemons=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

# What the kubelet changes on the host that down must undo: the kernel settings it
# forces (setupKernelTunables) and, should makeIPTablesUtilChains ever be on, its chains.
kubelet_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
kubelet_chains=(KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT)

# Pod-to-pod traffic on the bridge: with br_netfilter loaded, frames between two pods
# on $bridge pass iptables' FORWARD chain, whose policy Docker sets to DROP, so one pod
# could not reach another (berth's replicas forward requests to each other). up inserts
# this one rule (tagged, so that down removes exactly it); nothing else is touched.
pod_forward_rule=(-i "$bridge" -o "$bridge" -m comment --comment "berth-kube: pod to pod on $bridge" -j ACCEPT)

now() { echo "${EPOCHREALTIME}"; }
since() { awk -v a="$1" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1fs", b - a }'; }

# pid_of NAME: the pid from NAME's pid file when that process still runs, else nothing.
pid_of() {
	local f=$D/run/$1.pid pid
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

# stop_pid PID NAME [SECONDS]: TERM, wait, then KILL. Bounded.
stop_pid() {
	local pid=$1 name=$2 secs=${3:-10} i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "tests/kube: $name (pid $pid) did not stop in ${secs}s after SIGTERM; sending SIGKILL" >&2
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
}

# cluster_pids: processes of this cluster found without pid files (a crashed run):
# our daemons and containerd shims whose command line names the state dir.
cluster_pids() {
	local pid comm
	for pid in $(pgrep -f -- "$D/"); do
		comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
		case "$comm" in
		containerd | containerd-shim* | etcd | kube-apiserver | kube-controller* | kube-scheduler | kubelet) echo "$pid" ;;
		esac
	done
}

# cgroup_roots: the mount point of every cgroup hierarchy (v1 and v2).
cgroup_roots() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts; }

# mounts_under DIR: mount points at or below DIR, deepest (last mounted) first.
mounts_under() {
	awk -v d="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print m }' /proc/self/mountinfo | tac
}
