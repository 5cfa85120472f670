"""A real single-node SLURM cluster for the tests: munged, slurmctld and slurmd run as root
from a temporary folder (no systemd), with their own munge key, socket, ports and state, so
nothing of the machine's own configuration is read or changed.

The Debian packages ``slurmctld slurmd slurm-client munge`` come from tools/dev/install_slurm.sh
(called by tools/run_tests.sh). Where they are missing or the daemons do not come up,
:func:`start_cluster` raises :class:`ClusterUnavailable` with the reason.
"""
import os
import os.path as osp
import shutil
import socket
import subprocess
import time
from typing import Dict, List

PARTITION = 'debug'
DAEMONS = ('munged', 'slurmctld', 'slurmd', 'srun', 'sinfo', 'scontrol')
SLURM_CONF = """\
ClusterName=mmvit5test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName={partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


class ClusterUnavailable(RuntimeError):
    """The cluster could not be installed or started; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class SlurmCluster:
    """The daemons of one running cluster; :attr:`env` is what ``srun`` needs to reach it."""

    def __init__(self, root: str):
        self.root = root
        self.procs: List[subprocess.Popen] = []
        self.env: Dict[str, str] = dict(SLURM_CONF=osp.join(root, 'slurm.conf'))

    def spawn(self, *args: str) -> None:
        log = open(osp.join(self.root, osp.basename(args[0]) + '.out'), 'w')
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                           env=dict(os.environ, **self.env)))

    def logs(self) -> str:
        text = []
        for name in sorted(os.listdir(self.root)):
            if name.endswith(('.log', '.out')):
                with open(osp.join(self.root, name), errors='replace') as f:
                    text.append(f'--- {name}\n{f.read()[-2000:]}')
        return '\n'.join(text)

    def stop(self) -> None:
        # slurmd first, so no job step is left orphaned; each daemon is ours, by pid
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_cluster(root: str, timeout: float = 60.0) -> SlurmCluster:
    """Start munged, slurmctld and slurmd with a config under ``root`` (an empty folder).

    Returns the running :class:`SlurmCluster` once ``srun -n1 true`` succeeds.
    """
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        raise ClusterUnavailable(f'{", ".join(missing)} not installed; run '
                                 'tools/dev/install_slurm.sh (Debian: slurmctld slurmd '
                                 'slurm-client munge)')
    if os.geteuid() != 0:
        raise ClusterUnavailable('the test cluster runs its daemons as root; not root here')
    os.chmod(root, 0o700)  # munged refuses keys and sockets in group/world-writable folders
    for sub in ('state', 'spool'):
        os.makedirs(osp.join(root, sub))
    key = osp.join(root, 'munge.key')
    with open(key, 'wb') as f:
        f.write(os.urandom(128))
    os.chmod(key, 0o400)
    host = socket.gethostname().split('.')[0]
    with open(osp.join(root, 'slurm.conf'), 'w') as f:
        f.write(SLURM_CONF.format(host=host, root=root, cpus=os.cpu_count(),
                                  ctld_port=free_port(), d_port=free_port(),
                                  partition=PARTITION))
    cluster = SlurmCluster(root)
    conf = cluster.env['SLURM_CONF']
    cluster.spawn('munged', '--force', '--foreground', f'--socket={root}/munge.socket',
                  f'--key-file={key}', f'--pid-file={root}/munged.pid',
                  f'--log-file={root}/munged.log', f'--seed-file={root}/munged.seed')
    cluster.spawn('slurmctld', '-D', '-f', conf)
    cluster.spawn('slurmd', '-D', '-f', conf, '-N', host)
    deadline = time.time() + timeout
    while True:
        try:
            probe = subprocess.run(['srun', '-n1', '--time=1', 'true'], capture_output=True,
                                   text=True, timeout=timeout,
                                   env=dict(os.environ, **cluster.env))
            if probe.returncode == 0:
                return cluster
            reason = probe.stderr.strip()
        except subprocess.TimeoutExpired:
            reason = f'srun -n1 true took over {timeout:.0f} s'
        if time.time() > deadline or any(p.poll() is not None for p in cluster.procs):
            logs = cluster.logs()
            cluster.stop()
            raise ClusterUnavailable(f'the SLURM daemons did not come up ({reason})\n{logs}')
        time.sleep(1)
