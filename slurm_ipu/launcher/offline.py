"""--offline-target: the POPLAR_TARGET_OPTIONS an offline compile needs to match a system.

PopRun takes these keys from the V-IPU partition when it has one (ipuLinkDomainSize,
ipuLinkConfiguration, ipuLinkTopology, gatewayMode, instanceSize); offline there is none, so
the target names the system. Our table (PopRun's own list is not public): an IPU-POD4 is a
single IPU-Machine (a mesh, default links); from an IPU-POD16 up the IPUs form a torus with
sliding-window links, in IPU-Link domains of at most 64. instanceSize is the run's IPU count.
"""

from __future__ import annotations

from ..errors import ConfigError

TARGETS = {"pod4": 4, "pod16": 16, "pod64": 64, "pod128": 128, "pod256": 256}


def target_options(target: str, total_ipus: int) -> str:
    pod = TARGETS.get(target.lower())
    if pod is None:
        raise ConfigError(f"--offline-target {target!r}: use one of {', '.join(TARGETS)}")
    if total_ipus > pod:
        raise ConfigError(f"--offline-target {target}: the run needs {total_ipus} IPUs, more than the {pod} of "
                          f"an IPU-POD{pod}; use a larger target or fewer replicas")
    small = pod < 16
    options = {"ipuLinkDomainSize": str(min(pod, 64)),
               "ipuLinkConfiguration": "default" if small else "slidingWindow",
               "ipuLinkTopology": "mesh" if small else "torus", "gatewayMode": "true",
               "instanceSize": str(total_ipus)}
    import json

    return json.dumps(options, separators=(",", ":"))
