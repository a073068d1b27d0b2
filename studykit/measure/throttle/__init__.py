"""Run measurements on a throttled network: one network namespace per worker, ``tc`` shaping.

The paper (Agarwal et al., Sec. 4.2 and App. C, Fig. 3 and 19) verified its performance model by
limiting bandwidth with ``tc`` on a real cluster. :class:`ThrottledCluster` does the same on one
Linux machine: every worker is a process in its own network namespace, the namespaces are joined by
veth pairs (directly for two workers, through a bridge living in a namespace of its own otherwise),
and each worker's egress is shaped by a token bucket (``tc qdisc ... tbf``) at ``rate_gbps``. That is
a full-duplex NIC of ``rate_gbps`` per worker, which is what a ring all-reduce's bandwidth term
assumes. The kernel here has no ``netem``: with ``latency_ms`` the workers are instead joined by TUN
devices and a small user-space delay line (a switch that holds every packet ``latency_ms``), which is
CPU-bound well below the veth path (see ``docs/throttle.md``).

Safety: every address lives on links that exist only inside namespaces this module creates
(10.213.1.0/24 by default); nothing is added to the root namespace. Namespaces are named
``stkthr-<pid>-<seq>-...``; before creating them a cluster writes an owner record (pid, PID
namespace, process start time; ``/run/studykit-throttle/``). Teardown kills the processes inside and
deletes them even after an exception, Ctrl-C or SIGTERM; at start, the namespaces of records whose
owner provably no longer runs (same PID namespace, pid free or reused) are removed, and nothing else.

Modules: ``netns`` (ip/tc, namespaces, owner records), ``cluster`` (:class:`ThrottledCluster`),
``delayline`` (latency emulation), ``probe`` (all-reduce and TCP probes), ``cli`` (the command).

Shell::

    python -m studykit throttle --workers 2 --rate-gbps 0.5 1 2.5 --out reports/throttle/sweep.jsonl \\
        -- sweep --sizes 1M 16M
    python -m studykit throttle --gpus --workers 2 --rate-gbps 1 10 25 --out reports/bandwidth -- ddp --models resnet50
    python -m studykit throttle --rate-gbps 1 --out /tmp/probe.jsonl -- _probe --size-mb 16
    python -m studykit.measure.throttle _probe --size-mb 16        # inside a cluster: one gloo all-reduce timing
    python -m studykit.measure.throttle _stream --size-mb 64       # inside a cluster: RTT + iperf-like TCP stream 1 -> 0
    python -m studykit.measure.throttle _cleanup                 # delete namespaces of owners that are gone

Every worker process gets ``STUDYKIT_NETWORK`` (JSON, see :meth:`ThrottledCluster.network_info`),
for the record writer to store as each record's top-level ``network`` field (null on a real network);
records carry the emulated rate, and with a probe the measured rate and NCCL's transport.
"""
from .cli import main, merge_network
from .cluster import RankResult, ThrottledCluster
from .delayline import delay_line
from .netns import (
                    ENV_IPROUTE2,
                    ENV_NETWORK,
                    IFNAME,
                    NCCL_ENV,
                    PREFIX,
                    ThrottleUnavailable,
                    cleanup_leftovers,
                    list_namespaces,
                    unavailable_reason,
                    use_iproute2,
)
from .probe import nccl_transports, probe_allreduce, probe_stream

__all__ = [
    "ThrottledCluster", "RankResult", "ThrottleUnavailable", "unavailable_reason", "cleanup_leftovers",
    "list_namespaces", "probe_allreduce", "probe_stream", "merge_network", "main", "use_iproute2",
    "nccl_transports", "delay_line", "NCCL_ENV", "ENV_NETWORK", "ENV_IPROUTE2", "IFNAME", "PREFIX",
]
