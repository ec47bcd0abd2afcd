#!/usr/bin/env bash
# A throw-away SLURM cluster on this machine: four nodes (n1 to n4) with four fake GPUs
# each, in two partitions of two nodes: `debug` (n1, n2; the default) and `second` (n3,
# n4), so that two cluster test files run side by side, each with a pair of its own
# (tests/cluster). Also for trying profiles/slurm on a workstation.
#
#   scripts/testcluster.sh start    # needs root, Debian's slurm-wlm and munge
#   scripts/testcluster.sh status
#   scripts/testcluster.sh stop     # ends what start started (munged too, if start started it) and removes the files and /etc/hosts lines start wrote
#   scripts/testcluster.sh config   # only writes the configuration (start does it too)
#   scripts/testcluster.sh node n1  # starts one node's slurmd again (after a test stopped it)
#   scripts/testcluster.sh link 100mbit  # slows the link between n1 and n2 (link off: full speed)
#   scripts/testcluster.sh favour on     # n1's and n2's jobs first on the CPU (favour off: shared)
#   scripts/testcluster.sh net-up | net-down  # only the nodes' network (start and stop do it)
#
# Each node is a network host of its own: a network namespace ($NETNS_PREFIX-n1 to -n4) whose
# eth0 is one end of a veth pair, the other end on a bridge ($NETNS_PREFIX-br) in this
# machine's namespace, which gets the bridge's address and nothing else. The subnet is
# one that no address or route of this machine overlaps (an overlapping one would shadow
# the gateway and cut the machine off): the first free 10.213.X.0/24, or
# $DLSCALE_CLUSTER_SUBNET, checked before anything is added. Traffic stays between the
# namespaces and the bridge. `link RATE` puts a token bucket (tc tbf) on each node's eth0,
# so the nodes talk to each other at RATE (the test bed's pair, n1 and n2: `second`'s nodes
# keep their pace); stop removes the namespaces, the bridge and
# their addresses and routes, leaving `ip addr`, `ip route` and `ip netns` as they were.
#
# State, logs and fake GPUs live in $DLSCALE_CLUSTER_DIR (default /tmp/dlscale-slurm).
# The cluster's name (SLURM_CLUSTER_NAME in its jobs) is $DLSCALE_CLUSTER_NAME (default
# dlscaletest): a capture of another cluster's output starts it under another name.
# The configuration goes to SLURM's default place, /etc/slurm/slurm.conf (and gres.conf),
# because the Snakemake SLURM plugin's job steps drop every SLURM_* variable, SLURM_CONF
# included, before their inner srun; an existing configuration that this script did not
# write is never overwritten. The GPUs are character devices made with mknod, so SLURM
# allocates them and sets CUDA_VISIBLE_DEVICES, but nothing can compute on them: train
# with device: cpu. Job accounting is kept as sites keep it: slurmdbd (Debian's slurmdbd)
# over a MariaDB of its own (Debian's mariadb-server; data in $DIR/mysql, TCP on
# 127.0.0.1:13306 only), so sacct answers as on a real cluster.
set -euo pipefail

DIR="${DLSCALE_CLUSTER_DIR:-/tmp/dlscale-slurm}"
CLUSTER_NAME="${DLSCALE_CLUSTER_NAME:-dlscaletest}"
# the two overrides are for the test of `config` and `stop` (tests/unit/test_testcluster.py)
ETC="${DLSCALE_SLURM_ETC:-/etc/slurm}"
HOSTS="${DLSCALE_HOSTS_FILE:-/etc/hosts}"
CONF="$ETC/slurm.conf"
DBD_CONF="$ETC/slurmdbd.conf"
DB_PORT=13306
DBD_PORT=16819
DB_PASS=dlscale-test  # a throw-away database reachable from this host only
MARKER="# dlscale test cluster"
NETNS_PREFIX="${DLSCALE_NETNS_PREFIX:-dlscale}"
NET_STATE="$DIR/net.env"  # the subnet net-up chose, for the configuration and net-down
CGROUPS="${DLSCALE_CGROUPS:-/sys/fs/cgroup}"

# How SLURM tracks a job's processes: by cgroup, as most sites do, where this machine
# lets it write cgroup v1's freezer hierarchy; else by parent process (linuxproc). The two
# differ in who gets a job's SIGTERM (docs/slurm.md): the tests pass under both.
proctrack() {
    if [ -w "$CGROUPS/freezer" ]; then echo proctrack/cgroup; else echo proctrack/linuxproc; fi
}
# A job's memory held to what it asks for (--mem), as sites hold it (task/cgroup with
# ConstrainRAMSpace: the kernel's out-of-memory killer ends a job past it), where this
# machine lets SLURM write cgroup v1's memory hierarchy; else nothing holds it.
taskplugin() {
    if [ -w "$CGROUPS/memory" ] && [ -w "$CGROUPS/freezer" ]; then echo task/cgroup; else echo task/none; fi
}
constrain_ram() {
    if [ "$(taskplugin)" = task/cgroup ]; then echo yes; else echo no; fi
}
NODES=(n1 n2 n3 n4)
# the partitions, each "name:nodes"; the first is the default
PARTITIONS=(debug:n1,n2 second:n3,n4)
BED=(n1 n2)  # the test bed's pair: `link` and `favour` act on these nodes only

die() { echo "testcluster: $*" >&2; exit 1; }

# SLURM's tools read /etc/slurm/slurm.conf by themselves; SLURM_CONF is only worth setting
# for another place, and is harmful once stop has removed the file: a SLURM_CONF naming a
# missing file makes every SLURM command wait 59 s for a configless controller.
env_lines() {
    if [ "$CONF" = /etc/slurm/slurm.conf ]; then echo "# $CONF is SLURM's default place: nothing to set"
    else echo "export SLURM_CONF=$CONF"; fi
}

# One node's slurmd, in its network namespace (net-up) and a UTS namespace of its own
# whose hostname is the node's name: its job steps (and what they start) see that
# hostname and that network, as on a real cluster's nodes, so code that tells hosts apart
# (a point's lock, a requeued job on the other node, workers meeting over TCP) is tried
# with two hosts; both still share this machine's files and cores.
start_node() {
    mkdir -p "$DIR/spool-$1"
    local enter=()
    if [ -e "/run/netns/$NETNS_PREFIX-$1" ]; then enter=(nsenter "--net=/run/netns/$NETNS_PREFIX-$1"); fi
    "${enter[@]}" unshare --uts sh -c 'hostname "$1" && exec slurmd -N "$1"' slurmd-node "$1"
}

# The subnet of the nodes' network: $DLSCALE_CLUSTER_SUBNET, or the first 10.213.X.0/24
# that overlaps no IPv4 address or route of this machine (every routing table). An
# overlapping subnet is refused before anything is added.
free_subnet() {
    ip -j -4 addr show >"$DIR/net-addr.json"
    ip -j -4 route show table all >"$DIR/net-route.json"
    python3 - "$DIR/net-addr.json" "$DIR/net-route.json" "${DLSCALE_CLUSTER_SUBNET:-}" <<'PY'
import ipaddress, json, sys
used = [ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
        for link in json.load(open(sys.argv[1])) for a in link.get("addr_info", [])]
used += [ipaddress.ip_network(r["dst"], strict=False)
         for r in json.load(open(sys.argv[2])) if r.get("dst", "default") != "default"]
wanted = ([ipaddress.ip_network(sys.argv[3])] if sys.argv[3] else
          [ipaddress.ip_network(f"10.213.{x}.0/24") for x in range(256)])
for net in wanted:
    clash = [str(u) for u in used if u.overlaps(net)]
    if not clash:
        print(net.network_address)
        sys.exit(0)
    if sys.argv[3]:
        sys.exit(f"testcluster: subnet {net} overlaps {', '.join(clash)} on this machine: "
                 "expected one that no address or route uses")
sys.exit("testcluster: no 10.213.X.0/24 is free of this machine's addresses and routes")
PY
}

# node i's address (i from 1: .10+i of the nodes' subnet, whose .1 is the bridge's) where
# the nodes' network is up, else $2
node_address() {
    local base
    base=$(net_base)
    if [ -n "$base" ]; then echo "${base%.0}.$((10 + $1))"; else echo "$2"; fi
}

# no IPv6 (its link-local address and route) on a link of ours in the machine's namespace
no_ipv6() {
    local knob="/proc/sys/net/ipv6/conf/$1/disable_ipv6"
    if [ -w "$knob" ]; then echo 1 >"$knob"; fi
}

net_up() {
    [ "$(id -u)" = 0 ] || die "the nodes' network needs root (ip netns)"
    command -v ip >/dev/null || die "ip (iproute2) is not installed"
    mkdir -p "$DIR"
    if [ -f "$NET_STATE" ]; then echo "testcluster: the nodes' network is up ($NET_STATE)"; return 0; fi
    local base bridge="$NETNS_PREFIX-br" i=1
    base=$(free_subnet) || exit 1
    ip link show "$bridge" >/dev/null 2>&1 && die "a link named $bridge exists: not touching it"
    echo "SUBNET=$base" >"$NET_STATE"
    ip link add "$bridge" type bridge
    no_ipv6 "$bridge"
    ip addr add "${base%.0}.1/24" dev "$bridge"
    ip link set "$bridge" up
    for node in "${NODES[@]}"; do
        local ns="$NETNS_PREFIX-$node"
        ip netns add "$ns"
        ip link add "$ns" type veth peer name eth0 netns "$ns"
        no_ipv6 "$ns"
        ip link set "$ns" master "$bridge" up
        ip -n "$ns" addr add "$(node_address "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        i=$((i + 1))
    done
}

# Remove what net_up added, if it did.
net_down() {
    [ -f "$NET_STATE" ] || return 0
    for node in "${NODES[@]}"; do  # the pair first: a namespace's own goes later, by itself
        ip link del "$NETNS_PREFIX-$node" 2>/dev/null || true
        ip netns del "$NETNS_PREFIX-$node" 2>/dev/null || true
    done
    ip link del "$NETNS_PREFIX-br" 2>/dev/null || true
    rm -f "$NET_STATE" "$DIR/net-addr.json" "$DIR/net-route.json"
}

# The link between the nodes at RATE (tc's units: 100mbit, 1gbit), or `off`.
set_link() {
    [ -f "$NET_STATE" ] || die "the nodes' network is not up (start or net-up)"
    for node in "${BED[@]}"; do
        local ns="$NETNS_PREFIX-$node"
        tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
        if [ "$1" != off ]; then
            tc -n "$ns" qdisc add dev eth0 root tbf rate "$1" burst 64kb latency 500ms
        fi
    done
    echo "testcluster: the link between ${BED[0]} and ${BED[1]} is ${1/off/at full speed}"
}

# The test bed's jobs favoured on this machine's cores, as if its nodes had cores of their
# own: each of its nodes' slurmd goes into a cgroup (v1's cpu controller) of
# FAVOURED_SHARES, against 1024 for every other session (autogroup) on the machine, and
# every job step it starts after inherits it. A measurement across the nodes (the prediction's test bed) then sees
# its own jobs, not the rest of a test suite beside it. `off` moves the daemons back; jobs
# already running keep the weight until they end, and stop removes the cgroup.
FAVOURED="$CGROUPS/cpu/dlscale-testcluster"
FAVOURED_SHARES=16384
favour() {
    local into pidfile
    [ -w "$CGROUPS/cpu" ] || die "favour needs cgroup v1's cpu controller writable at $CGROUPS/cpu"
    case "$1" in
        on) mkdir -p "$FAVOURED"; echo "$FAVOURED_SHARES" > "$FAVOURED/cpu.shares"
            into="$FAVOURED" ;;
        off) into="$CGROUPS/cpu" ;;
        *) die "usage: $0 favour on|off (the nodes' jobs first on the CPU, or shared)" ;;
    esac
    for node in "${BED[@]}"; do
        pidfile="$DIR/slurmd-$node.pid"
        [ -f "$pidfile" ] || die "no slurmd is running for $node (start)"
        cat "$pidfile" > "$into/cgroup.procs"
    done
    if [ "$1" = on ]; then
        echo "testcluster: ${BED[*]}'s jobs are favoured on the CPU (cpu.shares $FAVOURED_SHARES)"
    else
        echo "testcluster: ${BED[*]}'s jobs share the CPU with everything else"
    fi
}

# what favour made, at stop: every process left in it back to the root, the cgroup removed
unfavour() {
    [ -d "$FAVOURED" ] || return 0
    local pid
    while read -r pid; do echo "$pid" > "$CGROUPS/cpu/cgroup.procs" 2>/dev/null || true
    done < "$FAVOURED/cgroup.procs"
    rmdir "$FAVOURED" 2>/dev/null || true
}

# The nodes' subnet (a.b.c.0), or nothing where their network is not up.
net_base() { if [ -f "$NET_STATE" ]; then sed -n 's/^SUBNET=//p' "$NET_STATE"; fi; }

running() {
    [ -f "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null
}

start_munge() {
    command -v munged >/dev/null || die "munge is not installed (apt-get install munge)"
    mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
    chmod 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey -c -k /etc/munge/munge.key >/dev/null 2>&1 || \
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        runuser -u munge -- munged --force
        for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
        # started here, so stop ends it (a munged that already worked is left alone)
        mkdir -p "$DIR" && cp /run/munge/munged.pid "$DIR/munged.pid"
    fi
    munge -n | unmunge >/dev/null || die "munge does not work (munge -n | unmunge)"
}

start_accounting() {
    command -v mariadbd >/dev/null || die "MariaDB is not installed (apt-get install mariadb-server)"
    command -v slurmdbd >/dev/null || die "slurmdbd is not installed (apt-get install slurmdbd)"
    mkdir -p "$DIR/mysql" "$DIR/mysql-run" "$DIR/log"
    chown mysql:mysql "$DIR/mysql" "$DIR/mysql-run"  # the server runs as mysql
    if [ ! -d "$DIR/mysql/mysql" ]; then
        mariadb-install-db --user=mysql --datadir="$DIR/mysql" --skip-test-db \
            >"$DIR/log/mariadb-install.log" 2>&1 || {
            cat "$DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    fi
    touch "$DIR/log/mysqld.log"
    chown mysql:mysql "$DIR/log/mysqld.log"
    mariadbd --user=mysql --datadir="$DIR/mysql" --socket="$DIR/mysql-run/mysqld.sock" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$DIR/mysql-run/mysqld.pid" \
        --log-error="$DIR/log/mysqld.log" --skip-name-resolve >/dev/null 2>&1 &
    for _ in $(seq 150); do
        mariadb-admin --socket="$DIR/mysql-run/mysqld.sock" ping >/dev/null 2>&1 && break
        sleep 0.2
    done
    mariadb-admin --socket="$DIR/mysql-run/mysqld.sock" ping >/dev/null 2>&1 || {
        tail -20 "$DIR/log/mysqld.log" >&2; die "MariaDB did not start"; }
    mariadb --socket="$DIR/mysql-run/mysqld.sock" -u root -e \
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    slurmdbd
    for _ in $(seq 150); do
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.2
    done
    sacctmgr -n list cluster >/dev/null 2>&1 || {
        tail -20 "$DIR/log/slurmdbd.log" >&2; die "slurmdbd did not start"; }
    sacctmgr -n list cluster format=cluster | grep -qw "$CLUSTER_NAME" ||
        sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
}

# slurm.conf's partition lines, the first partition the default
partition_lines() {
    local spec default=" Default=YES"
    for spec in "${PARTITIONS[@]}"; do
        echo "PartitionName=${spec%%:*} Nodes=${spec#*:}$default MaxTime=INFINITE State=UP"
        default=""
    done
}

write_config() {
    if [ -f "$CONF" ] && ! grep -q "^$MARKER" "$CONF"; then
        die "$CONF exists and was not written by this script: not overwriting a real SLURM configuration"
    fi
    for file in "$DBD_CONF" "$ETC/cgroup.conf"; do
        if [ -f "$file" ] && ! grep -q "^$MARKER" "$file"; then
            die "$file exists and was not written by this script: not overwriting it"
        fi
    done
    mkdir -p "$ETC" "$DIR/state" "$DIR/log" "$DIR/gpus"
    local gres="" nodes="" port=17001 base index=1 host=localhost
    base=$(net_base)
    if [ -n "$base" ]; then host="localhost(${base%.0}.1)"; fi  # the nodes reach it on the bridge
    for node in "${NODES[@]}"; do
        mkdir -p "$DIR/gpus/$node"
        for i in 0 1 2 3; do
            [ -c "$DIR/gpus/$node/gpu$i" ] || mknod "$DIR/gpus/$node/gpu$i" c 195 "$i"
        done
        gres+="NodeName=$node Name=gpu File=$DIR/gpus/$node/gpu[0-3]"$'\n'
        nodes+="NodeName=$node NodeHostname=localhost NodeAddr=$(node_address "$index" localhost) Port=$port CPUs=32 RealMemory=64000 Gres=gpu:4 State=UNKNOWN"$'\n'
        port=$((port + 1)) index=$((index + 1))
    done
    cat > "$CONF" <<EOF
$MARKER (scripts/testcluster.sh): four nodes in two partitions, fake GPUs, state in $DIR
ClusterName=$CLUSTER_NAME
SlurmctldHost=$host
SlurmctldPort=16817
SlurmUser=root
AuthType=auth/munge
ProctrackType=$(proctrack)
TaskPlugin=$(taskplugin)
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
MpiDefault=none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
MinJobAge=300
KillWait=5
ReturnToService=2
InactiveLimit=0
${nodes}$(partition_lines)
EOF
    printf '%s\nAutoDetect=off\n%s' "$MARKER" "$gres" > "$ETC/gres.conf"
    # proctrack/cgroup and task/cgroup as sites run them (v1's freezer and memory): a job
    # held to its --mem (ConstrainRAMSpace); its cores not constrained (2 CPUs here)
    printf '%s\n' "$MARKER" CgroupPlugin=cgroup/v1 CgroupAutomount=no \
        "CgroupMountpoint=$CGROUPS" ConstrainCores=no "ConstrainRAMSpace=$(constrain_ram)" \
        ConstrainDevices=no > "$ETC/cgroup.conf"
    (umask 077; cat > "$DBD_CONF" <<EOF
$MARKER (scripts/testcluster.sh): slurmdbd over the MariaDB in $DIR/mysql
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
EOF
    )
}

ensure_hosts() {
    # the node names are hostnames for the workers' TF_CONFIG: they must resolve; each
    # line added carries the marker, so that stop removes it and nothing else
    local i=0 addr
    for node in "${NODES[@]}"; do
        i=$((i + 1)) addr=$(node_address "$i" 127.0.0.1)
        if [ "$HOSTS" = /etc/hosts ]; then getent hosts "$node" >/dev/null && continue; fi
        grep -qE "^[^#]*[[:space:]]$node([[:space:]]|$)" "$HOSTS" 2>/dev/null && continue
        echo "$addr $node $MARKER" >> "$HOSTS"
    done
}

# Undo write_config and ensure_hosts: a machine after stop is as it was before start, so
# SLURM's tools (and the Snakemake SLURM plugin's probe at every snakemake start-up) no
# longer wait for a controller that is gone. Only files that carry the marker are removed.
# /etc/hosts is rewritten in place (cat >), not replaced: in containers it is a bind mount.
remove_config() {
    for file in "$CONF" "$ETC/gres.conf" "$ETC/cgroup.conf" "$DBD_CONF"; do
        if [ -f "$file" ] && grep -q "^$MARKER" "$file"; then rm -f "$file"; fi
    done
    if [ -f "$HOSTS" ] && grep -qF "$MARKER" "$HOSTS"; then
        local kept
        kept=$(grep -vF "$MARKER" "$HOSTS" || true)
        printf '%s\n' "$kept" > "$HOSTS"
    fi
}

start() {
    [ "$(id -u)" = 0 ] || die "start needs root (slurmd runs jobs as their users)"
    command -v slurmctld >/dev/null || die "SLURM is not installed (apt-get install slurm-wlm)"
    if running; then echo "testcluster: already running ($CONF)"; return 0; fi
    # a throw-away cluster: no jobs, node states or accounting survive an earlier start
    rm -rf "$DIR/state" "$DIR"/spool-* "$DIR"/*.pid "$DIR/mysql"
    start_munge
    net_up
    write_config
    ensure_hosts
    export SLURM_CONF="$CONF"
    start_accounting
    slurmctld -i
    for node in "${NODES[@]}"; do
        start_node "$node"
    done
    for _ in $(seq 60); do
        idle=$(sinfo -h -N -o "%N %t" 2>/dev/null | grep -c " idle" || true)
        [ "$idle" -ge "${#NODES[@]}" ] && break
        sleep 0.5
    done
    sinfo -h -N -o "%N %t" | grep -q " idle" || { tail -20 "$DIR/log/"*.log >&2; die "nodes did not come up"; }
    echo "testcluster: running, ${#NODES[*]} nodes with 4 fake GPUs each, partitions ${PARTITIONS[*]} ($CONF)"
}

# End the daemons of these pid files: each told at once, then waited for (up to 5 s each).
end_daemons() {
    local pidfile pid pids=()
    for pidfile in "$@"; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        pids+=("$pid")
        rm -f "$pidfile"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
}

stop() {
    export SLURM_CONF="$CONF"
    # only a running controller is asked: scancel waits for an absent one
    if running; then scancel --user="$(id -un)" 2>/dev/null || true; fi
    # SLURM's daemons first, then the database and munge they used to the end
    end_daemons "$DIR"/slurmd-*.pid "$DIR/slurmctld.pid" "$DIR/slurmdbd.pid"
    end_daemons "$DIR/mysql-run/mysqld.pid" "$DIR/munged.pid"
    remove_config
    net_down
    unfavour
    # the nodes' freezer cgroups slurmd made (proctrack/cgroup): empty now, removed
    for node in "${NODES[@]}"; do
        [ -d "$CGROUPS/freezer/slurm_$node" ] || continue
        find "$CGROUPS/freezer/slurm_$node" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    echo "testcluster: stopped; removed its configuration from $ETC, its lines from $HOSTS and its network"
}

case "${1:-}" in
    start) start ;;
    node) [ -n "${2:-}" ] || die "usage: $0 node NODE (start that node's slurmd again)"
        start_node "$2" ;;
    stop) stop ;;
    env) env_lines ;;
    config) write_config; ensure_hosts ;;
    link) [ -n "${2:-}" ] || die "usage: $0 link RATE|off (RATE as tc writes it: 100mbit)"
        set_link "$2" ;;
    favour) favour "${2:-}" ;;
    net-up) net_up ;;
    net-down) net_down ;;
    status)
        if running; then SLURM_CONF="$CONF" sinfo -N; else echo "testcluster: not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|status|env|config|node NODE|link RATE|favour on|off|net-up|net-down" >&2; exit 2 ;;
esac
