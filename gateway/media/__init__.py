"""Files people send: what they are (sniffed from their bytes, never their names) and
images made safe and small enough for a model (DESIGN §11)."""
