"""The life of a run: its states, the detached job agent, its files and logs."""
