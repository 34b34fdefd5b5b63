"""Windows and dialogs: the chat window, the model manager, settings and the welcome."""
