"""`slurm-ipu lab up --accounting`: MariaDB and slurmdbd beside the lab's Slurm, as a site runs
accounting (Debian's packages; docs/admin.md, "Accounting").

Both belong to the lab like its other daemons: a MariaDB of its own (data directory, socket and a
loopback port inside the lab's directory; nothing of the host's /etc/mysql is read), a slurmdbd
reading the lab's slurmdbd.conf, each recorded by pid and start time and stopped by `lab down`.
The database user's password is made once per lab and lives only in files mode 0600.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
from pathlib import Path

from ..errors import LabError
from ..fsutil import atomic_write, poll
from .procs import _log_tail, _record, _run, _running, _wait_pidfile, say
from .spec import SBIN

PACKAGES = ("slurmdbd", "mariadb-server-core", "mariadb-client-core")
TOOLS = {"slurmdbd": str(SBIN / "slurmdbd"), "mariadbd": "/usr/sbin/mariadbd",
         "mariadb-install-db": "/usr/bin/mariadb-install-db", "mariadb": "/usr/bin/mariadb"}
DATABASE = "slurm_acct_db"
DB_USER = "slurm"
# Slurm logs an error below half its recommendations (as_mysql's _check_database_variables):
# 2 GiB of buffer pool (24.11 asks 4; reserved, touched only as used), 64 MiB redo log, 900 s lock wait.
MARIADB_SETTINGS = ("--innodb-buffer-pool-size=2G", "--innodb-log-file-size=64M", "--innodb-lock-wait-timeout=900")


def check_installed() -> None:
    missing = [tool for tool, path in TOOLS.items() if not Path(path).exists()]
    if missing:
        raise LabError(f"--accounting needs {', '.join(missing)}: apt-get install {' '.join(PACKAGES)} "
                       "(or `make apt-accounting`)")


def password(spec) -> str:
    path = spec.path("etc", "db-password")
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        word = secrets.token_hex(16)
        atomic_write(path, word + "\n", 0o600)
        return word


def context(spec) -> dict:
    """What slurm.conf and slurmdbd.conf need (templates/lab/slurm.conf.j2, templates/lab/slurmdbd.conf.j2)."""
    return {"dbd_port": spec.dbd_port, "db_port": spec.db_port, "database": DATABASE, "db_user": DB_USER,
            "db_password": password(spec), "pid_file": str(spec.path("run", "slurmdbd.pid")),
            "log_file": str(spec.path("log", "slurmdbd.log"))}


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _sql(spec, statements: str) -> None:
    """As MariaDB's root over the lab's socket (unix-socket authentication: root only)."""
    proc = subprocess.run([TOOLS["mariadb"], "--no-defaults", f"--socket={spec.path('run', 'mariadb.sock')}",
                           "-u", "root"], input=statements, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise LabError(f"MariaDB refused the lab's set-up: {proc.stderr.strip()[:300]}")


def start_mariadb(spec, pids: dict) -> None:
    if _running(pids.get("mariadb")):
        return
    data, log = spec.path("mariadb"), spec.path("log", "mariadb.log")
    if not (data / "mysql").is_dir():
        shutil.rmtree(data, ignore_errors=True)  # a set-up that died half way starts again
        # --force: a host name that does not resolve (containers, chroots) is no reason to stop
        proc = subprocess.run([TOOLS["mariadb-install-db"], "--no-defaults", f"--datadir={data}", "--user=root",
                               "--auth-root-authentication-method=socket", "--skip-test-db", "--skip-name-resolve",
                               "--force"],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise LabError(f"mariadb-install-db failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    say(f"starting MariaDB on 127.0.0.1:{spec.db_port} (the lab's own data directory)")
    pidfile = spec.path("run", "mariadb.pid")
    pidfile.unlink(missing_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([TOOLS["mariadbd"], "--no-defaults", f"--datadir={data}", "--user=root",
                                 f"--socket={spec.path('run', 'mariadb.sock')}", f"--port={spec.db_port}",
                                 "--bind-address=127.0.0.1", "--skip-name-resolve", f"--pid-file={pidfile}",
                                 f"--log-error={log}", *MARIADB_SETTINGS],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    pids["mariadb"] = _record(proc.pid)
    if not poll(lambda: _listening(spec.db_port) or proc.poll() is not None, 60) or proc.poll() is not None:
        raise LabError(f"MariaDB did not start: {_log_tail(log)} (log: {log})")
    word = password(spec)
    # The database made here, not by slurmdbd: 24.11's slurmdbd, when it creates it, reuses the
    # connection handle that failed, and with MariaDB 11.8's client library (Debian 13) its next
    # query fails ("5027 Number of columns in result (=1) set exceeds ...") and slurmdbd stops.
    _sql(spec, f"CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
               f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{word}';\n"
               f"ALTER USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{word}';\n"
               f"GRANT ALL ON {DATABASE}.* TO '{DB_USER}'@'127.0.0.1';\n")


def start_slurmdbd(spec, pids: dict) -> None:
    if _running(pids.get("slurmdbd")):
        return
    say(f"starting slurmdbd on 127.0.0.1:{spec.dbd_port}")
    pidfile, log = spec.path("run", "slurmdbd.pid"), spec.path("log", "slurmdbd.log")
    pidfile.unlink(missing_ok=True)
    _run([TOOLS["slurmdbd"]], spec, log=log)  # reads slurmdbd.conf beside $SLURM_CONF
    pids["slurmdbd"] = _record(_wait_pidfile(pidfile, 30, "slurmdbd", log))
    # slurmctld registers the cluster when it starts: slurmdbd must answer by then
    if not poll(lambda: _listening(spec.dbd_port), 60):
        raise LabError(f"slurmdbd does not answer on port {spec.dbd_port}: see {log}")
