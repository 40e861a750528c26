"""The memory backend: queues, pub-sub, dead letters and a handoff sink in this process."""
