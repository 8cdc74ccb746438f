"""Durable emulator state in sqlite.

Every change is one transaction, so a `kill -9` at any instant leaves either the old or the
new state. The `ipus` table's primary key is the IPU number: the database itself refuses to
put one IPU in two partitions, whatever the code above it does. WAL with synchronous=NORMAL
survives a killed process (not a power cut), which is what the emulator must model.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    name TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    num_gcds INTEGER NOT NULL,
    num_ilds INTEGER NOT NULL,
    reconfigurable INTEGER NOT NULL,
    allocation TEXT NOT NULL,
    owner_uid INTEGER NOT NULL,
    hosts TEXT NOT NULL,
    state TEXT NOT NULL,
    ready_at REAL NOT NULL,
    created_at REAL NOT NULL,
    total_replicas INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ipus (
    ipu INTEGER PRIMARY KEY,
    partition TEXT NOT NULL REFERENCES partitions(name) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS allocations (
    name TEXT PRIMARY KEY,
    agents TEXT NOT NULL,
    grants TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_faults (
    agent INTEGER PRIMARY KEY,
    state TEXT NOT NULL,
    ipu INTEGER,
    since REAL NOT NULL
);
"""

COLUMNS = (
    "name", "size", "num_gcds", "num_ilds", "reconfigurable", "allocation", "owner_uid",
    "hosts", "state", "ready_at", "created_at", "total_replicas",
)


class Store:
    def __init__(self, path: Path):
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _write(self, statements: list[tuple[str, tuple]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def partitions(self) -> list[dict]:
        rows = self._rows(f"SELECT {', '.join(COLUMNS)} FROM partitions ORDER BY created_at, name")
        ipus = self.ipus_by_partition()
        return [self._record(row, ipus.get(row[0], [])) for row in rows]

    def get(self, name: str) -> dict | None:
        rows = self._rows(f"SELECT {', '.join(COLUMNS)} FROM partitions WHERE name = ?", (name,))
        if not rows:
            return None
        ipus = [r[0] for r in self._rows("SELECT ipu FROM ipus WHERE partition = ? ORDER BY ipu", (name,))]
        return self._record(rows[0], ipus)

    def ipus_by_partition(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for ipu, name in self._rows("SELECT ipu, partition FROM ipus ORDER BY ipu"):
            out.setdefault(name, []).append(ipu)
        return out

    def used_ipus(self) -> set[int]:
        return {r[0] for r in self._rows("SELECT ipu FROM ipus")}

    def insert(self, record: dict, ipus: list[int]) -> None:
        values = tuple(json.dumps(record[c]) if c == "hosts" else record[c] for c in COLUMNS)
        marks = ", ".join("?" for _ in COLUMNS)
        self._write(
            [(f"INSERT INTO partitions ({', '.join(COLUMNS)}) VALUES ({marks})", values)]
            + [("INSERT INTO ipus (ipu, partition) VALUES (?, ?)", (i, record["name"])) for i in ipus]
        )

    def delete(self, name: str) -> None:
        self._write([("DELETE FROM partitions WHERE name = ?", (name,))])

    def set_state(self, name: str, state: str, ready_at: float | None = None) -> None:
        if ready_at is None:
            self._write([("UPDATE partitions SET state = ? WHERE name = ?", (state, name))])
        else:
            self._write([("UPDATE partitions SET state = ?, ready_at = ? WHERE name = ?", (state, ready_at, name))])

    # Allocations an admin created (`vipu-admin create allocation`); the cluster file's own are
    # not stored: they come back from the file at every start.
    def allocations(self) -> list[dict]:
        rows = self._rows("SELECT name, agents, grants, created_at FROM allocations ORDER BY created_at, name")
        return [{"name": n, "agents": json.loads(a), "grants": json.loads(g), "created_at": t} for n, a, g, t in rows]

    def insert_allocation(self, name: str, agents: list[int], grants: list[int], created_at: float) -> None:
        self._write([("INSERT INTO allocations (name, agents, grants, created_at) VALUES (?, ?, ?, ?)",
                      (name, json.dumps(sorted(agents)), json.dumps(sorted(grants)), created_at))])

    def set_grants(self, name: str, grants: list[int]) -> None:
        self._write([("UPDATE allocations SET grants = ? WHERE name = ?", (json.dumps(sorted(grants)), name))])

    def delete_allocation(self, name: str) -> None:
        self._write([("DELETE FROM allocations WHERE name = ?", (name,))])

    # IPU-Machines that failed (`vipu-emu fault agent`): stored, since a failed machine stays failed
    # across a controller restart; a healthy one has no row.
    def agent_faults(self) -> dict[int, dict]:
        rows = self._rows("SELECT agent, state, ipu, since FROM agent_faults ORDER BY agent")
        return {a: {"state": s, "ipu": i, "since": t} for a, s, i, t in rows}

    def set_agent_fault(self, agent: int, state: str | None, ipu: int | None, since: float) -> None:
        if state is None:
            self._write([("DELETE FROM agent_faults WHERE agent = ?", (agent,))])
        else:
            self._write([("INSERT OR REPLACE INTO agent_faults (agent, state, ipu, since) VALUES (?, ?, ?, ?)",
                          (agent, state, ipu, since))])

    def meta(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._write([("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))])

    @staticmethod
    def _record(row: tuple, ipus: list[int]) -> dict:
        rec = dict(zip(COLUMNS, row, strict=True))
        rec["hosts"] = json.loads(rec["hosts"])
        rec["reconfigurable"] = bool(rec["reconfigurable"])
        rec["ipus"] = ipus
        return rec
