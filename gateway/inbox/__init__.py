"""What comes in from every channel: the core behind the connector port (a message
received, stored once, its turn started), who may talk (access policy) and pairing."""
