"""What operators do, whichever way they reach it (REST, the dashboard, chat commands):
the overview of channels and work, messages sent as an operator, linking people."""
