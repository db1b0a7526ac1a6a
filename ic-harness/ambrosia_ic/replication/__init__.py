"""Active/active: the replicas of one instance around one log, each composing a
coordinator (``coordinator.Coordinator``) with a fenced log sink. ``shared_dir``: replicas
sharing the instance's directory (epoch files, seals, a checkpointing secondary);
``raft``: the log in a ØMQ RAFT cluster; ``common``: what both share."""
