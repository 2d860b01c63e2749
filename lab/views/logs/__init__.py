"""Any folder of event files: its runs, the selection, the hparams table, tags and the Logs
charts."""
