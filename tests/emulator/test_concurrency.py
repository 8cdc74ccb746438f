"""32 concurrent clients x 50 create/remove cycles: no IPU is ever held twice, every IPU is free
at the end, and a kill -9 of the server in the middle of the load changes none of that."""

from __future__ import annotations

import random
import threading
import time

from slurm_ipu import errors
from slurm_ipu.emulator.api import Api, ApiError
from slurm_ipu.emulator.process import EmulatorProcess

from ..waiting import wait_for

CLIENTS, CYCLES = 32, 50
SIZES = (1, 1, 2, 2, 4)


class Ledger:
    """IPUs each live partition holds, as its creator learned them. A create whose IPUs are
    already in the ledger is a double allocation."""

    def __init__(self):
        self.lock = threading.Lock()
        self.holder: dict[int, str] = {}
        self.violations: list[str] = []

    def take(self, name: str, ipus: list[int]) -> None:
        with self.lock:
            for i in ipus:
                if i in self.holder:
                    self.violations.append(f"IPU {i} given to {name} while {self.holder[i]} holds it")
                self.holder[i] = name

    def drop(self, name: str) -> None:
        with self.lock:
            for i in [i for i, n in self.holder.items() if n == name]:
                del self.holder[i]


def retry(call, deadline: float):
    """Clients ride out a dead server: retry only when unreachable, until the deadline."""
    while True:
        try:
            return call()
        except errors.VipuUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def worker(port: int, idx: int, ledger: Ledger, deadline: float, done: list, failures: list) -> None:
    api = Api("127.0.0.1", port, timeout=5)
    rng = random.Random(idx)
    try:
        for cycle in range(CYCLES):
            name = f"c{idx}-{cycle}"
            try:
                doc = retry(lambda n=name: api.create_partition(name=n, size=rng.choice(SIZES)), deadline)
            except ApiError as exc:
                if exc.code == "ALREADY_EXISTS":  # our create landed just before a crash
                    doc = retry(lambda n=name: api.get_partition(n), deadline)
                elif exc.code == "RESOURCE_EXHAUSTED":
                    continue
                else:
                    raise
            ledger.take(name, [i["id"] for i in doc["partition"]["spec"]["ipus"]])
            ledger.drop(name)
            try:
                retry(lambda n=name: api.remove_partition(n), deadline)
            except ApiError as exc:
                if exc.code != "NOT_FOUND":  # our remove landed just before a crash
                    raise
        done.append(idx)
    except Exception as exc:  # reported by the test, never swallowed
        failures.append(f"client {idx}: {type(exc).__name__}: {exc}")
    finally:
        api.close()


def no_ipu_twice(api: Api) -> None:
    seen: dict[int, str] = {}
    for item in api.list_partitions():
        p = item["partition"]
        for ipu in p["spec"]["ipus"]:
            assert ipu["id"] not in seen, f"IPU {ipu['id']} in {seen.get(ipu['id'])} and {p['id']}"
            seen[ipu["id"]] = p["id"]


def run_load(emu: EmulatorProcess, on_half=None) -> Ledger:
    ledger, done, failures = Ledger(), [], []
    deadline = time.monotonic() + 240
    threads = [threading.Thread(target=worker, args=(emu.port, i, ledger, deadline, done, failures))
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    if on_half:
        on_half()
    for t in threads:
        t.join(timeout=max(1, deadline - time.monotonic()))
    assert not failures, failures[:5]
    assert sorted(done) == list(range(CLIENTS))
    assert not ledger.violations, ledger.violations[:5]
    return ledger


def assert_all_free(emu) -> None:
    api = Api(admin_socket=emu.admin_socket)  # the check is the admin API's: served on the admin socket only
    assert api.list_partitions() == []
    check = api.check()
    assert check["ok"] and check["used"] == 0
    api.close()


def test_concurrent_create_remove_never_double_allocates(emu):
    stop = threading.Event()
    problems = []

    def watch():
        watcher = Api("127.0.0.1", emu.port)
        while not stop.is_set():
            try:
                no_ipu_twice(watcher)
            except AssertionError as exc:
                problems.append(str(exc))
        watcher.close()

    w = threading.Thread(target=watch)
    w.start()
    try:
        run_load(emu)
    finally:
        stop.set()
        w.join(30)
    assert not problems, problems[:3]
    assert_all_free(emu)


def test_kill_9_mid_load_then_restart_keeps_invariants(emu, tmp_path):
    holder = {"emu": emu}

    def crash_and_restart():
        api = Api("127.0.0.1", emu.port)
        wait_for("the load under way (8 partitions)", lambda: len(api.list_partitions()) >= 8, 60, interval=0.01)
        api.close()
        emu.kill9()
        assert not emu.alive()
        again = EmulatorProcess.start(emu.state_dir, cluster="pod64", port=emu.port)
        holder["emu"] = again
        api = Api(admin_socket=again.admin_socket)
        check = api.check()  # state as the crash left it: consistent, every IPU held once
        assert check["ok"], check
        no_ipu_twice(api)
        api.close()

    try:
        run_load(emu, on_half=crash_and_restart)
        assert_all_free(holder["emu"])
    finally:
        holder["emu"].stop()
