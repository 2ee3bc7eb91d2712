"""Engine replicas past one machine: Ray actors behind a relQuery-aware dispatcher.

* ``dispatch.py``: the placement policies (plain Python; the simulator uses them too);
* ``actor.py``: one replica, a Ray actor holding an ``Engine``;
* ``cluster.py``: ``Cluster``, the replicas behind the ``Backend`` protocol (as ``Engine``).
"""

from relserve.cluster.dispatch import DISPATCHER_NAMES, Dispatcher, Part, Work, make_dispatcher

__all__ = ["DISPATCHER_NAMES", "Cluster", "Dispatcher", "Part", "Work", "make_dispatcher"]


def __getattr__(name: str):
    if name == "Cluster":  # imports ray only when asked for
        from relserve.cluster.cluster import Cluster

        return Cluster
    raise AttributeError(name)
