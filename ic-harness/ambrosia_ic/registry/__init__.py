"""The local registry: where instances are registered and coordinators find each other.

The real coordinator keeps registrations in Azure tables. Ours keeps them as files:

```
$AMBROSIA_HOME/                 (default ~/.ambrosia)
  link-secret                   32 random bytes (hex); coordinators prove they know it
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
from .home import HOME_HELP, ambrosia_home, link_secret
from .instances import find_instances, instance_dir, load, registration_exists, set_versions
from .ports import registered_ports, unregistered_free_ports
from .published import adopt, published
from .registration import (
    CREATE_SERVICE_MODES,
    DEFAULT_KEEP_CHECKPOINTS,
    Registration,
    check_instance_name,
)
from .replicas import Replica, replica
from .writes import add_replica, register

__all__ = [
    "CREATE_SERVICE_MODES",
    "DEFAULT_KEEP_CHECKPOINTS",
    "HOME_HELP",
    "Registration",
    "Replica",
    "add_replica",
    "adopt",
    "ambrosia_home",
    "check_instance_name",
    "find_instances",
    "instance_dir",
    "link_secret",
    "load",
    "published",
    "record_class",
    "recorded_class",
    "register",
    "registered_ports",
    "registration_exists",
    "remember_claim",
    "remembered_claim",
    "replica",
    "set_versions",
    "unregistered_free_ports",
]
