"""The command line and service plumbing every part shares: `gpupair` and its lazy subcommand
table, flags with env defaults, outputs, the serve loop, JSON logs, TLS, the CLI reference and
the version. The parts' `main` modules stand on it; nothing of the pure packages imports it."""
