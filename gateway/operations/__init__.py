"""What is done whichever way it is asked for (REST, the dashboard, chat commands):
the overview of channels and work, messages sent as an operator, linking people,
erasing a person or a conversation."""
