"""What the tests share: the command line run in-process (``cli_runs``), tiny models and encoders made on the
spot (``tiny_model``), servers started for a test (``servers``), scripted agent policies, index files edited as
an adversary would (``index_edits``), Search-R1's files and trajectories, and independent reference
implementations (``oracles``, ``level_oracle``). Import them as ``from support.NAME import ...``."""
