"""What replicas share and decide between them: leases and their keeping, and which
replica leads (holds the platform connections only one may hold)."""
