"""What replicas share and decide between them through the database: leases and
their keeping."""
