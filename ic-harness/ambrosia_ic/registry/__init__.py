"""The local registry: where instances are registered and coordinators find each other.

The real coordinator keeps registrations in Azure tables. Ours keeps them as files:

```
$AMBROSIA_HOME/                 (default ~/.ambrosia)
  link-secret                   32 random bytes (hex); coordinators prove they know it
                                (copied between machines with `ambrosia link-secret`)
  instances/<name>.json         one registration per instance
  replicas/<name>/<N>.json      active/active replica N's ports (replica 0: the registration's)
  classes/<name>.json           per version, the MODULE:CLASS `ambrosia run` ran (and from where)
  claims/<log key>.json         a Raft-backed callee's newest epoch claim seen here (a hint)
```

Every function takes the home directory explicitly (``home=None`` means "from the
environment"), so two registries can be used in one process.
"""

from __future__ import annotations

from .claims import remember_claim, remembered_claim
from .classes import record_class, recorded_class
from .home import HOME_HELP, ambrosia_home
from .hosts import LOOPBACK, format_address, link_hosts
from .instances import (
    find_instances,
    has_started,
    instance_dir,
    load,
    mark_started,
    registration_exists,
    set_versions,
    start_afresh,
)
from .ports import registered_ports, unregistered_free_ports
from .published import adopt, adopted, published
from .registration import (
    CREATE_SERVICE_MODES,
    DEFAULT_KEEP_CHECKPOINTS,
    DEFAULT_LEASE_MS,
    Registration,
    check_instance_name,
)
from .replicas import Replica, link_lines, replica, replicas
from .secret import export_secret, fingerprint, import_secret, link_secret, read_secret_file
from .writes import add_replica, register

__all__ = [
    "CREATE_SERVICE_MODES",
    "DEFAULT_KEEP_CHECKPOINTS",
    "DEFAULT_LEASE_MS",
    "HOME_HELP",
    "LOOPBACK",
    "Registration",
    "Replica",
    "add_replica",
    "adopt",
    "adopted",
    "ambrosia_home",
    "check_instance_name",
    "export_secret",
    "find_instances",
    "fingerprint",
    "format_address",
    "has_started",
    "import_secret",
    "instance_dir",
    "link_hosts",
    "link_lines",
    "link_secret",
    "load",
    "mark_started",
    "published",
    "read_secret_file",
    "record_class",
    "recorded_class",
    "register",
    "registered_ports",
    "registration_exists",
    "remember_claim",
    "remembered_claim",
    "replica",
    "replicas",
    "set_versions",
    "start_afresh",
    "unregistered_free_ports",
]
