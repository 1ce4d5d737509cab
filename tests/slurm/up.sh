#!/usr/bin/env bash
# up.sh - start a throw-away single-node SLURM cluster with two fake GPUs (gres gpu:fake:2).
# Adapted from the project's shared slurm-testbed for tests/test_slurm.py.
#   ACCOUNTING=0 (default): munged + slurmctld + slurmd, accounting_storage/none.
#                           sacct does NOT work -> use `slurm-status-command: squeue`.
#   ACCOUNTING=1          : also mariadb + slurmdbd, so sacct/sacctmgr work (plugin defaults).
# Each test bed is private: state, logs, keys, configs and a `srun` shim live under $BASE, and its
# daemons listen on their own ports (SLURMCTLD_PORT, SLURMD_PORT, and with accounting
# SLURMDBD_PORT, MARIADB_PORT; free ones are chosen where unset), so that several test beds can
# run on one machine at once. Nothing is written outside $BASE: clients find the cluster through
# SLURM_CONF and PATH, both in $BASE/env.sh. Stop it with down.sh (same BASE). Run as root; no
# systemd needed.
set -euo pipefail
BASE=${BASE:-${TMPDIR:-/tmp}/slurm-testbed}
ACCOUNTING=${ACCOUNTING:-0}
NODE=$(hostname -s)
NCPU=${NCPU:-$(nproc)}  # more than the machine has is allowed (config_overrides): jobs are not bound to cores
MEM_MB=${MEM_MB:-$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 2048 ))}  # 2 GiB headroom; more is allowed too
T0=$(date +%s.%N)

# Ports: those given, else free ones (bound to port 0 together, so that they differ). A port
# chosen so is free when chosen; the daemons bind it a moment later.
read -r free_ctld free_d free_dbd free_db < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("", 0))
print(*(s.getsockname()[1] for s in socks))')
SLURMCTLD_PORT=${SLURMCTLD_PORT:-$free_ctld}
SLURMD_PORT=${SLURMD_PORT:-$free_d}
SLURMDBD_PORT=${SLURMDBD_PORT:-$free_dbd}
MARIADB_PORT=${MARIADB_PORT:-$free_db}

# 0. packages (idempotent; ~15 s for slurm+munge, ~10 s more for mariadb+slurmdbd)
PKGS="slurm-wlm slurmctld slurmd slurm-client munge"
[ "$ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
missing=$(for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  [ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null
fi

mkdir -p "$BASE"/{bin,etc,run,log,spool/ctld,spool/d,munge}
chmod 755 "$BASE" "$BASE/munge"          # socket dir must be traversable by job users

# 1. munge with a private key and socket
[ -s "$BASE/munge/munge.key" ] || dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$BASE/munge/munge.key"
/usr/sbin/munged --force \
  --socket="$BASE/munge/munge.socket.2" --key-file="$BASE/munge/munge.key" \
  --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/log/munged.log" \
  --seed-file="$BASE/munge/munged.seed"

# 2. fake GPUs: gres/gpu insists on a character/block device, so clone /dev/null (c 1 3).
#    The trailing digit is the GPU index -> jobs get CUDA_VISIBLE_DEVICES=0 or 1.
for g in 0 1; do [ -c "$BASE/run/nvidia$g" ] || mknod -m 666 "$BASE/run/nvidia$g" c 1 3; done

if [ "$ACCOUNTING" = 1 ]; then
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$SLURMDBD_PORT
AccountingStoragePass=$BASE/munge/munge.socket.2
AccountingStorageTRES=gres/gpu"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.txt"
fi

cat > "$BASE/etc/slurm.conf" <<CONF
ClusterName=smkprobe
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket.2
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$BASE/spool/ctld
SlurmdSpoolDir=$BASE/spool/d
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$ACCT_CONF
# Memory is enforced without cgroups (test beds side by side would share the node's): each second,
# a step whose processes hold more than the job's memory is killed, with SLURM's line in the job's
# output ("StepId=N.M exceeded memory limit (USED > LIMIT), being killed").
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MinJobAge=3600
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
NodeName=$NODE CPUs=$NCPU RealMemory=$MEM_MB Gres=gpu:fake:2 State=UNKNOWN
PartitionName=main Nodes=$NODE Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=1000
PartitionName=gpu  Nodes=$NODE Default=NO  MaxTime=INFINITE State=UP DefMemPerCPU=1000
PartitionName=short Nodes=$NODE Default=NO MaxTime=1 State=UP DefMemPerCPU=1000
CONF

cat > "$BASE/etc/gres.conf" <<CONF
NodeName=$NODE Name=gpu Type=fake File=$BASE/run/nvidia[0-1]
CONF

# Clients find this cluster by SLURM_CONF (and gres.conf beside it), never /etc/slurm, which
# other test beds on the machine would share. The snakemake slurm jobstep plugin strips every
# SLURM_* variable (SLURM_CONF included) before its inner `srun`, so $BASE/bin, first in PATH,
# holds an `srun` that puts SLURM_CONF back.
cat > "$BASE/bin/srun" <<SHIM
#!/bin/sh
SLURM_CONF="$BASE/etc/slurm.conf" exec /usr/bin/srun "\$@"
SHIM
chmod 755 "$BASE/bin/srun"
cat > "$BASE/env.sh" <<ENV
export SLURM_CONF=$BASE/etc/slurm.conf
export PATH=$BASE/bin:\$PATH
ENV
export SLURM_CONF="$BASE/etc/slurm.conf"

# 3. optional accounting: mariadb (loopback TCP only) + slurmdbd
if [ "$ACCOUNTING" = 1 ]; then
  mkdir -p "$BASE/db" "$BASE/dbrun"; chown mysql:mysql "$BASE/db" "$BASE/dbrun"
  [ -d "$BASE/db/mysql" ] || mariadb-install-db --no-defaults --user=mysql --datadir="$BASE/db" \
      --auth-root-authentication-method=socket --skip-test-db >"$BASE/log/mariadb-install.log" 2>&1
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$BASE/db" \
      --socket="$BASE/dbrun/mysqld.sock" --pid-file="$BASE/dbrun/mysqld.pid" \
      --log-error="$BASE/dbrun/mariadb.log" --bind-address=127.0.0.1 --port="$MARIADB_PORT" \
      --skip-name-resolve --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
  for i in $(seq 1 80); do [ -S "$BASE/dbrun/mysqld.sock" ] && break; sleep 0.25; done
  mariadb --socket="$BASE/dbrun/mysqld.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  cat > "$BASE/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$BASE/munge/munge.socket.2
DbdHost=localhost
DbdPort=$SLURMDBD_PORT
SlurmUser=root
PidFile=$BASE/run/slurmdbd.pid
LogFile=$BASE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MARIADB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
  chmod 600 "$BASE/etc/slurmdbd.conf"
  /usr/sbin/slurmdbd                      # reads slurmdbd.conf next to $SLURM_CONF
  for i in $(seq 1 40); do timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.25; done
  sacctmgr -i add cluster smkprobe >/dev/null 2>&1 || true
  sacctmgr -i add account smk Description=probe Organization=probe >/dev/null 2>&1 || true
  sacctmgr -i add user "$(id -un)" Account=smk DefaultAccount=smk >/dev/null 2>&1 || true
fi

# 4. slurm daemons (they daemonize and write pid files)
/usr/sbin/slurmctld -i -f "$SLURM_CONF"   # -i: ignore state left by an earlier run
/usr/sbin/slurmd -f "$SLURM_CONF"

# 5. wait until the node is idle (each sinfo bounded; fail fast if slurmctld died)
st=""
for i in $(seq 1 60); do
  kill -0 "$(cat "$BASE/run/slurmctld.pid" 2>/dev/null || echo 0)" 2>/dev/null \
    || { echo "slurmctld died:"; tail -n 5 "$BASE/log/slurmctld.log"; exit 1; }
  st=$(timeout 5 sinfo -h -N -n "$NODE" -o %t 2>/dev/null | head -1 || true)
  [ "$st" = "idle" ] && break
  sleep 0.5
done
sinfo -N -o "%N %P %t %c %m %G"
awk -v a="$T0" -v b="$(date +%s.%N)" -v e="$BASE/env.sh" \
  'BEGIN{printf "cluster up in %.1f s (source %s)\n", b-a, e}'
if [ "$ACCOUNTING" = 1 ]; then
  echo "ports: slurmctld $SLURMCTLD_PORT, slurmd $SLURMD_PORT, slurmdbd $SLURMDBD_PORT, mariadb $MARIADB_PORT"
else
  echo "ports: slurmctld $SLURMCTLD_PORT, slurmd $SLURMD_PORT"
fi
[ "$st" = "idle" ]
