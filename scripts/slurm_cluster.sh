#!/usr/bin/env bash
# slurm_cluster.sh — a one-node Slurm cluster on this machine, for the slurm executor's tests
# and benchmark (`npuforge build --executor slurm`). Runs as root; needs slurm-wlm and munge
# (scripts/setup.sh installs them).
#
#   bash scripts/slurm_cluster.sh start    # munged, slurmctld and slurmd; waits for the node
#   bash scripts/slurm_cluster.sh stop     # stops the daemons it started
#   bash scripts/slurm_cluster.sh status   # sinfo; `running` exits 0 when it is up
#   eval "$(bash scripts/slurm_cluster.sh env)"   # SLURM_CONF for sbatch, squeue, scontrol
#
# Everything lives in $NPUFORGE_SLURM_DIR (default /tmp/npuforge-slurm): slurm.conf, state,
# logs, pid files. Nothing under /etc is written: the clients find the cluster by SLURM_CONF.
# proctrack/linuxproc, task/none and jobacct_gather/none need no cgroups, so the daemons
# start in a container as well. The node offers this machine's CPUs and memory.
set -euo pipefail
DIR=${NPUFORGE_SLURM_DIR:-/tmp/npuforge-slurm}
CONF=$DIR/slurm.conf
HOST=$(hostname -s)

need_root() {
  if [ "$(id -u)" -ne 0 ]; then echo "slurm_cluster.sh: the daemons run as root; run it as root" >&2; exit 2; fi
  for c in munged slurmctld slurmd sinfo; do
    command -v "$c" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin
    command -v "$c" >/dev/null 2>&1 || { echo "slurm_cluster.sh: $c not found (bash scripts/setup.sh installs slurm-wlm and munge)" >&2; exit 2; }
  done
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
  local cpus mem
  cpus=$(nproc)
  mem=$(awk '/^MemTotal:/ {print int($2 / 1024) - 512}' /proc/meminfo)  # MB, leaving some for the system
  cat > "$CONF" <<CONF
# Written by npuforge scripts/slurm_cluster.sh: a one-node cluster on $HOST.
ClusterName=npuforge
SlurmctldHost=$HOST
MpiDefault=none
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerType=sched/backfill
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ReturnToService=2
MinJobAge=3600
SlurmdTimeout=30
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
  need_root
  if running; then
    echo "slurm_cluster.sh: already running ($CONF)" >&2
    return 0
  fi
  write_conf
  export SLURM_CONF=$CONF
  # munged: the key from the package (or a new one), its socket where the clients look.
  [ -f /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 "$DIR/munge"
  if ! munge -n >/dev/null 2>&1; then  # no munged answering yet
    runuser -u munge -- munged --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
      --seed-file="$DIR/munge/munged.seed"
    touch "$DIR/started-munged"
  fi
  slurmctld -f "$CONF"
  slurmd -f "$CONF"
  for _ in $(seq 1 60); do
    if sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then
      echo "slurm_cluster.sh: one-node cluster up on $HOST ($CONF); clients need SLURM_CONF=$CONF" >&2
      return 0
    fi
    sleep 1
  done
  echo "slurm_cluster.sh: the node did not come up in 60 s; see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
  stop
  exit 1
}

stop() {
  export SLURM_CONF=$CONF
  for d in slurmd slurmctld; do
    if [ -f "$DIR/$d.pid" ]; then
      pid=$(cat "$DIR/$d.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true  # a daemon stuck on a dead peer does not stop on TERM
      rm -f "$DIR/$d.pid"
    fi
  done
  if [ -f "$DIR/started-munged" ] && [ -f "$DIR/munge/munged.pid" ]; then
    pid=$(cat "$DIR/munge/munged.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$DIR/started-munged"
  fi
  # The job state of this throwaway cluster goes with it (a later start begins empty).
  rm -rf "$DIR/state" "$DIR/spool"
}

running() { [ -f "$DIR/slurmctld.pid" ] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; }

case ${1:-} in
  start) start ;;
  running) running ;;
  stop) stop ;;
  status) SLURM_CONF=$CONF sinfo -N ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: bash scripts/slurm_cluster.sh start|stop|status|running|env" >&2; exit 2 ;;
esac
