"""Helpers the test modules share: run factories, waits on processes, event-file records. No
test module imports another test module; they import from here."""
