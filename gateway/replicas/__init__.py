"""What replicas share and decide between them: leases and their keeping, which
replica leads (holds the platform connections only one may hold), and which sweeps."""
