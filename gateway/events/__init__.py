"""Events of a conversation as they happen (a message stored, a reply being written),
for whoever watches it on this replica, and across replicas through Redis."""
