"""Parsers for `vipu` output, in one place: the JSON of `--showjson`, and error lines.

Only `partition.id` and `partition.spec.{ipus,num_gcds,num_replicas}` are confirmed from
public code (poptorch); everything else is read if present and defaulted if not, so a real
`vipu` that prints less still parses.
"""

from __future__ import annotations

import json
import re

from .. import errors
from ..errors import VipuError
from .types import Partition

# Error classification: the emulator appends `[CODE]`; a real vipu's wording is unknown
# (UNCONFIRMED), so fall back to phrases. First match wins.
CODE_RE = re.compile(r"\[([A-Z_]+)\]\s*$", re.M)
CODES = {
    "INVALID_ARGUMENT": errors.InvalidPartition,
    "PERMISSION_DENIED": errors.PermissionDenied,
    "NOT_FOUND": errors.PartitionNotFound,
    "ALREADY_EXISTS": errors.PartitionExists,
    "RESOURCE_EXHAUSTED": errors.InsufficientIpus,
    "FAILED_PRECONDITION": errors.PartitionNotReady,
    "INTERNAL": errors.VipuUnavailable,
    "UNAVAILABLE": errors.VipuUnavailable,
    "DEADLINE_EXCEEDED": errors.VipuUnavailable,
}
PHRASES = [
    (re.compile(r"already exists", re.I), errors.PartitionExists),
    (re.compile(r"not found|no such partition|does not exist", re.I), errors.PartitionNotFound),
    (re.compile(r"not enough|insufficient|exhausted|no free ipus", re.I), errors.InsufficientIpus),
    (re.compile(r"permission|not allowed|denied|unauthori[sz]ed", re.I), errors.PermissionDenied),
    (re.compile(r"unavailable|connection refused|connect|deadline|timed? ?out|transport", re.I),
     errors.VipuUnavailable),
    (re.compile(r"invalid|must be|power of two", re.I), errors.InvalidPartition),
]


class VipuCommandFailed(VipuError):
    """The `vipu` command itself could not run: a configuration error, never an answer."""

    kind = "command"


def classify_error(text: str, returncode: int) -> VipuError:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    message = lines[-1] if lines else f"vipu exited with status {returncode} and printed nothing"
    message = re.sub(r"^(error|Error|ERROR):\s*", "", message)
    if returncode in (126, 127):
        # The shell's "cannot execute" / "not found": read as the controller's NOT_FOUND it would
        # make the epilog report a partition "already gone" that is still there.
        return VipuCommandFailed(f"the vipu command could not run (exit {returncode}: {message}); "
                                 "check vipu.command in the slurm-ipu config")
    match = CODE_RE.search(text)
    if match and match.group(1) in CODES:
        return CODES[match.group(1)](CODE_RE.sub("", message).strip())
    for pattern, cls in PHRASES:
        if pattern.search(text):
            return cls(message)
    return VipuError(message)


def _state(raw: object) -> str:
    text = str(raw or "ACTIVE").upper()
    return text[3:] if text.startswith("PS_") else text


def _ipu_id(entry: object) -> int:
    return int(entry["id"]) if isinstance(entry, dict) else int(entry)


def partition_from_json(doc: object) -> Partition:
    if not isinstance(doc, dict):
        raise VipuError(f"unexpected partition entry from vipu: {doc!r:.120}")
    body = doc.get("partition", doc)
    try:
        spec = body.get("spec") or {}
        ipus = tuple(_ipu_id(i) for i in spec.get("ipus") or ())
        hosts = tuple(str(h) for h in spec.get("hosts") or ())
        return Partition(
            name=str(body["id"]),
            size=int(spec.get("size") or len(ipus)),
            num_gcds=int(spec.get("num_gcds") or 1),
            num_ilds=int(spec.get("num_ilds") or 1),
            state=_state((body.get("status") or {}).get("state") or body.get("state")),
            reconfigurable=bool(spec.get("reconfigurable", False)),
            allocation=spec.get("allocation"),
            ipus=ipus,
            hosts=hosts,
            owner_uid=spec.get("owner_uid"),
            extra=body,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise VipuError(f"unexpected partition entry from vipu ({type(exc).__name__}: {exc}): {doc!r:.120}") from None


def parse_partitions(text: str) -> list[Partition]:
    try:
        doc = json.loads(text or "[]")
    except ValueError:
        raise VipuError(f"`vipu list partitions --showjson` printed something that is not JSON: "
                        f"{text[:120]!r}") from None
    if isinstance(doc, dict):  # tolerate {"partitions": [...]}
        doc = doc.get("partitions", [])
    if not isinstance(doc, list):
        raise VipuError(f"`vipu list partitions --showjson` printed {type(doc).__name__}, expected a list")
    return [partition_from_json(item) for item in doc]
