#!/usr/bin/env bash
# up.sh - start a throw-away single-node SLURM cluster with two fake GPUs (gres gpu:fake:2).
# Adapted from the project's shared slurm-testbed for tests/test_slurm.py.
#   ACCOUNTING=0 (default): munged + slurmctld + slurmd, accounting_storage/none.
#                           sacct does NOT work -> use `slurm-status-command: squeue`.
#   ACCOUNTING=1          : also mariadb + slurmdbd, so sacct/sacctmgr work (plugin defaults).
# State, logs, keys and configs live under $BASE. Outside $BASE it only writes the
# symlinks /etc/slurm/{slurm,gres}.conf (see note below). Run as root; no systemd needed.
set -euo pipefail
BASE=${BASE:-${TMPDIR:-/tmp}/slurm-testbed}
ACCOUNTING=${ACCOUNTING:-0}
NODE=$(hostname -s)
NCPU=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 2048 ))   # 2 GiB headroom
T0=$(date +%s.%N)

# 0. packages (idempotent; ~15 s for slurm+munge, ~10 s more for mariadb+slurmdbd)
PKGS="slurm-wlm slurmctld slurmd slurm-client munge"
[ "$ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
missing=$(for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  [ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null
fi

mkdir -p "$BASE"/{etc,run,log,spool/ctld,spool/d,munge}
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
AccountingStoragePass=$BASE/munge/munge.socket.2
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
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
SlurmctldPort=6817
SlurmdPort=6818
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
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MinJobAge=600
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
NodeName=$NODE CPUs=$NCPU RealMemory=$MEM_MB Gres=gpu:fake:2 State=UNKNOWN
PartitionName=main Nodes=$NODE Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=1000
PartitionName=gpu  Nodes=$NODE Default=NO  MaxTime=INFINITE State=UP DefMemPerCPU=1000
CONF

cat > "$BASE/etc/gres.conf" <<CONF
NodeName=$NODE Name=gpu Type=fake File=$BASE/run/nvidia[0-1]
CONF

# The slurm jobstep plugin strips every SLURM_* variable (SLURM_CONF included) before
# its inner `srun`, so the config must also be found at the compiled-in default path.
mkdir -p /etc/slurm
for f in slurm.conf gres.conf; do
  if [ -e "/etc/slurm/$f" ] && [ "$(readlink "/etc/slurm/$f")" != "$BASE/etc/$f" ]; then
    echo "refusing to overwrite existing /etc/slurm/$f" >&2; exit 1
  fi
  ln -sfn "$BASE/etc/$f" "/etc/slurm/$f"
done
echo "export SLURM_CONF=$BASE/etc/slurm.conf" > "$BASE/env.sh"
export SLURM_CONF="$BASE/etc/slurm.conf"

# 3. optional accounting: mariadb (loopback TCP only) + slurmdbd
if [ "$ACCOUNTING" = 1 ]; then
  mkdir -p "$BASE/db" "$BASE/dbrun"; chown mysql:mysql "$BASE/db" "$BASE/dbrun"
  [ -d "$BASE/db/mysql" ] || mariadb-install-db --no-defaults --user=mysql --datadir="$BASE/db" \
      --auth-root-authentication-method=socket --skip-test-db >"$BASE/log/mariadb-install.log" 2>&1
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$BASE/db" \
      --socket="$BASE/dbrun/mysqld.sock" --pid-file="$BASE/dbrun/mysqld.pid" \
      --log-error="$BASE/dbrun/mariadb.log" --bind-address=127.0.0.1 --port=3306 \
      --skip-name-resolve --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
  for i in $(seq 1 80); do [ -S "$BASE/dbrun/mysqld.sock" ] && break; sleep 0.25; done
  mariadb --socket="$BASE/dbrun/mysqld.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  cat > "$BASE/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$BASE/munge/munge.socket.2
DbdHost=localhost
SlurmUser=root
PidFile=$BASE/run/slurmdbd.pid
LogFile=$BASE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
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
/usr/sbin/slurmctld -i            # -i: ignore state left by an earlier run
/usr/sbin/slurmd

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
[ "$st" = "idle" ]
