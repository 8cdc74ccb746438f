"""A stateful fake `vipu` at the subprocess boundary: it answers argument lists the way the
real command does (stdout, stderr, exit status), keeps partitions, and can be told to fail."""

from __future__ import annotations

import json
import subprocess


class FakeVipu:
    def __init__(self):
        self.partitions: dict[str, dict] = {}
        self.calls: list[list[str]] = []
        self.failures: list[tuple[str, int]] = []  # (stderr, exit) for the next calls
        self.timeouts = 0            # next N calls time out
        self.pending_polls = 0       # new partitions stay PENDING for N list calls
        self.end_state = "ACTIVE"
        self.create_json = False     # answer create --showjson with the partition, as the emulator does
        self.free: int | None = None  # IPUs left for creates (None: unlimited)
        self.ipu_ild = None          # IPU index -> the ILD shown beside it (None: not shown)
        self.agents = 16             # IPU-Machines ag0.. that `vipu-admin list agents` shows
        self.down: dict[str, str] = {}  # agent -> its status when not Up (Down, Error)
        self.reset_error: str | None = None  # what `reset partition` says when it fails

    def __call__(self, argv, capture_output=True, text=True, timeout=None, stdin=None):
        args = self._strip(list(argv))
        self.calls.append(args)
        if self.timeouts:
            self.timeouts -= 1
            raise subprocess.TimeoutExpired(argv, timeout)
        if self.failures:
            err, code = self.failures.pop(0)
            return subprocess.CompletedProcess(argv, code, "", err)
        out, err, code = self._handle(args)
        return subprocess.CompletedProcess(argv, code, out, err)

    @staticmethod
    def _strip(argv):
        argv = argv[1:]
        out = []
        skip = False
        for a in argv:
            if skip:
                skip = False
                continue
            if a in ("--api-host", "--api-port"):
                skip = True
                continue
            out.append(a)
        return out

    def _handle(self, args):
        verb, rest = args[0], args[2:]
        if verb == "create":
            name, size = rest[0], int(rest[rest.index("--size") + 1])
            if name in self.partitions:
                return "", f"error: partition {name} already exists [ALREADY_EXISTS]\n", 1
            gcds = int(rest[rest.index("--num-gcds") + 1]) if "--num-gcds" in rest else 1
            if self.free is not None and size > self.free:
                return "", f"error: only {self.free} IPUs free [RESOURCE_EXHAUSTED]\n", 1
            self.partitions[name] = {"id": name, "size": size, "gcds": gcds, "polls": self.pending_polls,
                                     "argv": rest, "hosts": self._value(rest, "--hosts", "").split(",") if
                                     "--hosts" in rest else [], "owner_uid": self._owner(rest),
                                     "allocation": self._value(rest, "--allocation", None)}
            if self.free is not None:
                self.free -= size
            if self.create_json and "--showjson" in rest:
                return json.dumps(self._doc(self.partitions[name])), "", 0
            return f"create partition ({name}): success.\n", "", 0
        if verb == "remove":
            if rest[0] not in self.partitions:
                return "", f"error: partition {rest[0]} not found [NOT_FOUND]\n", 1
            if self.free is not None:
                self.free += self.partitions[rest[0]]["size"]
            del self.partitions[rest[0]]
            return f"remove partition ({rest[0]}): success.\n", "", 0
        if verb == "reset":
            if rest[0] not in self.partitions:
                return "", f"error: partition {rest[0]} not found [NOT_FOUND]\n", 1
            if self.reset_error:
                return "", self.reset_error, 1
            self.partitions[rest[0]]["polls"] = self.pending_polls  # back to ready after the reset
            if "--showjson" in rest and self.create_json:
                return json.dumps(self._doc(self.partitions[rest[0]])), "", 0
            return f"reset partition ({rest[0]}): success.\n", "", 0
        if verb == "list" and args[1:2] == ["agents"]:
            return json.dumps({"agents": [{"id": f"ag{k}", "status": self.down.get(f"ag{k}", "Up")}
                                          for k in range(self.agents)]}), "", 0
        if verb == "list":
            return json.dumps([self._doc(p) for p in self.partitions.values()]), "", 0
        return "", f"error: unknown command {args} [INVALID_ARGUMENT]\n", 2

    def _doc(self, p):
        state = self.end_state
        if p["polls"] > 0:
            p["polls"] -= 1
            state = "PENDING"
        ipus = [{"id": i} if self.ipu_ild is None else {"id": i, "ild": self.ipu_ild(i)} for i in range(p["size"])]
        spec = {"size": p["size"], "num_gcds": p["gcds"], "ipus": ipus,
                "hosts": p.get("hosts") or []}
        if p.get("owner_uid") is not None:
            spec["owner_uid"] = p["owner_uid"]
        if p.get("allocation"):
            spec["allocation"] = p["allocation"]
        return {"partition": {"id": p["id"], "spec": spec, "status": {"state": f"PS_{state}"}}}

    @staticmethod
    def _value(args, flag, default):
        return args[args.index(flag) + 1] if flag in args else default

    def _owner(self, args):
        return int(args[args.index("--owner-uid") + 1]) if "--owner-uid" in args else None

    def plant(self, name: str, size: int, owner_uid: int | None = None, hosts=(), allocation: str | None = None):
        """A partition made outside slurm-ipu (another user, or an admin by hand)."""
        self.partitions[name] = {"id": name, "size": size, "gcds": 1, "polls": 0, "argv": [],
                                 "hosts": list(hosts), "owner_uid": owner_uid, "allocation": allocation}
